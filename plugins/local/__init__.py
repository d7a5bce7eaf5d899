"""Remote tier on a local or NFS directory."""

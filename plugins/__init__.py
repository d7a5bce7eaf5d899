"""Built-in tierlog plugins (remote storage backends)."""

"""Remote tier on S3 or MinIO through s3fs."""

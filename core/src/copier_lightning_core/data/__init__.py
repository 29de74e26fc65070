"""Data as users have it: files on disk (files.py) and Parquet tables or shard folders,
local or on object storage, streamed a row group at a time (parquet_rows.py)."""

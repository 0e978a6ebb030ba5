"""Profiles on disk (Parquet + metadata), the jobs catalog, import and export of trace files."""

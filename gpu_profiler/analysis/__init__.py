"""Pure-numpy analyses of a `LengthHistogram`: nothing here reads data."""

from gpu_profiler.analysis.buckets import BucketRow, BucketTable, bucket_table, clipped_counts

__all__ = ["BucketRow", "BucketTable", "bucket_table", "clipped_counts"]

"""What `gpu_profiler.kernels.tfrecord.events` returns, shared with the reader that calls it
(`gpu_profiler.losslog`); numba-free, so importing it starts nothing."""

# Its status: the records read up to one not whole in the bytes given (DONE), a record
# whose CRC does not match (CORRUPT), no slots left for the next record's values (ROOM),
# no room for its new tags (TAGS).
DONE, CORRUPT, ROOM, TAGS = 0, 1, 2, 3
# The kind of each value: no scalar in it, a float32, float64 or float16 (its bits in
# ``bits``), or a record to decode with protobuf (``steps`` then holds where its data
# starts in the bytes and ``bits`` its length).
NONE, F32, F64, F16, FALLBACK = -1, 0, 1, 2, -2
# Columns of its ``state`` array: the distinct tags so far, the bytes of the tag store in
# use, and 1 when the hash table must be rebuilt from the tags (it was grown).
S_TAGS, S_STORE, S_REBUILD = 0, 1, 2

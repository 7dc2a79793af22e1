"""The vocabulary of the Arrow IPC parsers (`gpu_profiler.kernels.ipc`, and the stream
counter in `gpu_profiler.kernels.streams`), shared with the readers that call them
(`gpu_profiler.readers.ipc.metadata`) and read their records: the exception they raise on
hostile metadata and its reason codes, the message types, the columns of a parsed-message
record, the layout vector, the walk's outcomes and why `check` refuses a record.
numba-free, so importing it starts nothing."""


class Corrupt(Exception):
    """Raised by the kernels with ``args = (position, reason code)``."""


(E_BOUNDS, E_VTABLE, E_FRAME, E_VERSION, E_HEADER, E_BODY, E_NODES, E_BUFFERS, E_CODEC,
 E_TRUNC) = range(10)
REASONS = {
    E_BOUNDS: "metadata offset points outside the message",
    E_VTABLE: "malformed flatbuffer vtable",
    E_FRAME: "negative message length",
    E_VERSION: "unsupported metadata version (need V4 or V5)",
    E_HEADER: "unexpected message type",
    E_BODY: "negative body length",
    E_NODES: "field node count does not match the schema",
    E_BUFFERS: "buffer count does not match the schema",
    E_CODEC: "unknown body compression",
    E_TRUNC: "message body runs past the end of the file",
}

# Message header types (the MessageHeader union).
SCHEMA, DICTIONARY_BATCH, RECORD_BATCH = 1, 2, 3

# Columns of a parsed-message record (one int64 row per message).
(R_MSG, R_TYPE, R_BODY, R_BODYLEN, R_ROWS, R_LEN, R_NULLS, R_VOFF, R_VLEN, R_DOFF, R_DLEN,
 R_CODEC, R_DICT, R_DELTA, R_CHILD) = range(15)
NREC = 15

# Layout vector handed to the parsers (see readers.ipc_layout.Layout.vector).
L_NODE, L_BUF, L_NODES, L_BUFS, L_VIEWS, L_VTOTAL, L_DICT = range(7)

# walk() outcomes
NEED_MORE, END, FULL = 0, 1, 2

#: Why `check` refused a record (its second result indexes this).
CHECKS = (
    "the column's length differs from the batch's",
    "null count out of range",
    "negative buffer offset or length",
    "buffer runs past the end of the message body",
    "buffer too short for the batch's rows",
    "validity bitmap too short for the batch's rows",
    "compressed buffer without its length prefix",
)

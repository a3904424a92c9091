"""The measuring proxy's fixed limits: sizes, counts and times (docs/proxy.md)."""

from __future__ import annotations

#: the measured endpoints (POST); any other request passes through unmeasured
MEASURED_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})

#: distinct model labels per worker; samples of further ones are dropped and counted
MAX_MODELS = 16
#: a model name longer than this is not a label value (it is dropped with its samples)
MAX_MODEL_CHARS = 128
#: one server-sent event line longer than this ends the measurement of that answer
#: (the answer still passes); bounds the parser's memory per connection
MAX_EVENT_BYTES = 256 * 1024
#: a plain JSON answer is read for its usage only up to this size
MAX_JSON_BYTES = 1024 * 1024

#: a request or answer head larger than this is refused (431 / 502)
MAX_HEAD_BYTES = 64 * 1024
#: request bytes held while the worker's connection is being opened; reading pauses past it
MAX_PENDING_BYTES = 256 * 1024
#: a transport's write buffer past this pauses the other side's reading (back-pressure)
WRITE_BUFFER_BYTES = 64 * 1024
#: idle connections to the worker kept for reuse, at most
MAX_POOLED = 256
#: a connection to a worker that announced no keep-alive time is reused within this
#: long: well below uvicorn's 5 s (vLLM, SGLang), docs/proxy.md
UNANNOUNCED_IDLE_S = 2.0
#: a request sent on a reused connection is held (by reference) until its answer's
#: first byte, up to this size, so that it can go again if the worker had closed it
REPLAY_MAX_BYTES = 1024 * 1024
#: a refused connect is tried again after this, doubling up to CONNECT_RETRY_MAX_S,
#: within the worker's connect_timeout (nothing was sent: a restarting worker)
CONNECT_RETRY_FIRST_S = 0.05
CONNECT_RETRY_MAX_S = 0.5
#: a worker that closes a connection within this long of a streamed answer's end,
#: unasked, is taken to close after every streamed answer (llama.cpp's llama-server):
#: its connections are not kept after one
STREAM_CLOSE_S = 0.5
#: after a 413 the client's remaining body is read and dropped this long at most, so
#: that the client reads the answer instead of a reset
LINGER_S = 2.0

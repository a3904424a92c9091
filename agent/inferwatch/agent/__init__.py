"""The sidecar agent: its sources (`collectors/`), the exposition, the server and `inferwatch run`."""

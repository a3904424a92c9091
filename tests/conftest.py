"""pytest configuration shared by every test module."""

from __future__ import annotations

import logging

logging.getLogger("asyncio").setLevel(logging.WARNING)

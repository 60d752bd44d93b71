"""phi-core's loggers: every record they emit is redacted (its message, its arguments and its
traceback), so a key that an exception quotes (a URL with ``?key=…``, an echoed header) never
reaches a log, the last-resort handler's stderr included.

Each module takes its logger from :func:`get_logger` instead of ``logging.getLogger``: a filter
on a parent logger does not see its children's records, so every logger carries its own."""

from __future__ import annotations

import logging

from .errors import redact

__all__ = ["RedactingFilter", "get_logger"]


class RedactingFilter(logging.Filter):
    """Redact a record in place (see :func:`~phi_core.errors.redact`); never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: the handler reports it as logging does
            return True
        record.msg, record.args = redact(message), None
        if record.exc_info and record.exc_info[0] is not None:
            text = record.exc_text or logging.Formatter().formatException(record.exc_info)
            # formatters print exc_text when it is set; without exc_info they cannot re-render
            # the traceback from the exception itself
            record.exc_text, record.exc_info = redact(text), None
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_FILTER = RedactingFilter()


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with the redacting filter on it (added once)."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger

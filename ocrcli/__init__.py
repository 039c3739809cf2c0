"""ocrcli: batch document-to-Markdown converter with lossless speculative decoding."""

__version__ = "0.1.0"

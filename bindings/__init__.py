"""Binding queries to adapters: ``Application``, ``Stream``, ``Query``."""

from bindings.application import Application
from bindings.query import Query
from bindings.stream import Stream

__all__ = ["Application", "Query", "Stream"]

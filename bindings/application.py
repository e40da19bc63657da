"""``Application``: owns the SparkSession and the queries."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from adapters.base import OutputAdapterFactory
from engine._spark import default_session
from engine.errors import QueryBuildError
from engine.events import EventShape
from engine.plan import Node
from engine.runtime import Runtime

__all__ = ["Application"]


class Application:
    """A named application: one SparkSession (``local[*]`` by default, or the one given) and its
    queries by name."""

    def __init__(self, name: str, spark: SparkSession | None = None, *, master: str | None = None):
        self.name = name
        self.spark = spark or default_session(name, master)
        # The engine's plans (unions of broadcast CTI rows, many windows) trip Spark's constraint
        # inference (NoSuchElementException in UnionBase.rewriteConstraints) and gain nothing
        # from it; turning it off also shortens planning of every epoch.
        self.spark.conf.set("spark.sql.constraintPropagation.enabled", "false")
        self.queries: dict[str, Any] = {}

    def _query(
        self,
        name: str,
        root: Node,
        factory: OutputAdapterFactory[Any],
        config: Any,
        shape: EventShape,
    ):
        from bindings.query import Query

        if name in self.queries:
            raise QueryBuildError(
                f"application {self.name!r} already has a query named {name!r}. "
                "Fix: choose another name"
            )
        if not isinstance(factory, OutputAdapterFactory):
            raise TypeError(
                f"query {name!r}: output factory must be an OutputAdapterFactory instance; got "
                f"{factory!r}"
            )
        if shape not in factory.supported_shapes:
            raise QueryBuildError(
                f"query {name!r}: {type(factory).__name__} cannot consume {shape.value}; it "
                f"supports {sorted(s.value for s in factory.supported_shapes)}"
            )
        runtime = Runtime(self.spark, name, root, factory.create(config, shape), shape)
        query = Query(name, runtime)
        self.queries[name] = query
        return query

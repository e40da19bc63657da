"""``Application``: owns the SparkSession and the queries."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctistream.bindings.template import QueryBinder, QueryTemplate
from ctistream.engine._spark import cache_jvm_classes, default_session
from ctistream.engine.contracts import OutputAdapterFactory
from ctistream.engine.errors import QueryBuildError
from ctistream.engine.events import EventShape
from ctistream.engine.plan import Node
from ctistream.engine.runtime import Runtime
from pyspark.sql import SparkSession

if TYPE_CHECKING:
    from ctistream.bindings.query import Query
    from ctistream.bindings.stream import Stream

__all__ = ["Application"]


class Application:
    """A named application: one SparkSession (``local[*]`` by default, or the one given) and its
    queries by name."""

    def __init__(self, name: str, spark: SparkSession | None = None, *, master: str | None = None):
        self.name = name
        self.spark = spark or default_session(name, master)
        cache_jvm_classes(self.spark)
        # The engine's plans (unions of broadcast CTI rows, many windows) trip Spark's constraint
        # inference (NoSuchElementException in UnionBase.rewriteConstraints) and gain nothing
        # from it; turning it off also shortens planning of every epoch.
        self.spark.conf.set("spark.sql.constraintPropagation.enabled", "false")
        # Adaptive execution runs every shuffle stage as a job of its own and re-plans between
        # them: an epoch's small plans went from 8 jobs to 22 with it, for no gain at the
        # engine's few shuffle partitions.
        self.spark.conf.set("spark.sql.adaptive.enabled", "false")
        # An epoch keeps its intermediate rows in Spark's columnar cache for the few jobs that
        # read them and drops them at its end: compressing them (the default) cost more than
        # the rows' scan itself (a profile of B1 put most of ingress's job in the compressor's
        # statistics); B1 ran 15-20 % faster without it.
        self.spark.conf.set("spark.sql.inMemoryColumnarStorage.compressed", "false")
        self.queries: dict[str, Any] = {}
        self.query_templates: dict[str, QueryTemplate] = {}

    def create_query_template(
        self, name: str, stream: Stream, description: str = ""
    ) -> QueryTemplate:
        """A :class:`~bindings.QueryTemplate` of ``stream`` registered under ``name``, as
        StreamInsight's ``Application.CreateQueryTemplate``."""
        if name in self.query_templates:
            raise QueryBuildError(
                f"application {self.name!r} already has a query template named {name!r}. "
                "Fix: choose another name, or reuse app.query_templates[name]"
            )
        template = QueryTemplate(name, stream, description)
        self.query_templates[name] = template
        return template

    def create_query(self, name: str, binder: QueryBinder, description: str = "") -> Query:
        """A query named ``name`` from a :class:`~bindings.QueryBinder`'s template and bindings,
        as StreamInsight's ``Application.CreateQuery``. Every binding problem (unknown or unbound
        input, unsupported shape, missing or extra consumer, import of an unbound input, schema
        disagreement with the template) raises :class:`~engine.errors.QueryBuildError` here."""
        if not isinstance(binder, QueryBinder):
            raise TypeError(
                f"query {name!r}: create_query takes a QueryBinder; got {binder!r}. Fix: "
                "app.create_query(name, QueryBinder(template).bind_producer(...).add_consumer(...))"
            )
        if name in self.queries:
            raise QueryBuildError(
                f"application {self.name!r} already has a query named {name!r}. "
                "Fix: choose another name"
            )
        root, consumer = binder._resolve(name)
        query = self._query(name, root, consumer.factory, consumer.config, consumer.shape)
        query.description = description
        return query

    def _query(
        self,
        name: str,
        root: Node,
        factory: OutputAdapterFactory[Any],
        config: Any,
        shape: EventShape,
    ) -> Query:
        from ctistream.bindings.query import Query

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

"""The query-binder model: ``QueryTemplate`` and ``QueryBinder``, as in StreamInsight.

A template is a query written once over *unbound* inputs (:meth:`Stream.input`: a name and a
payload schema) with one output, the template's stream. A binder binds each input to an input
adapter factory (:meth:`QueryBinder.bind_producer`) and the output to one output adapter factory
(:meth:`QueryBinder.add_consumer`); :meth:`Application.create_query` checks the binding and makes
a :class:`~bindings.Query`, the same as :meth:`Stream.to_query` makes. One template serves any
number of queries, each with its own bindings::

    readings = Stream.input("readings", "sensor bigint, v double")
    template = app.create_query_template("hot", readings.where(F.col("v") > 30))
    binder = (
        QueryBinder(template)
        .bind_producer("readings", MemoryInputFactory(), cfg, EventShape.POINT, settings)
        .add_consumer("out", MemoryOutputFactory(), MemoryOutputConfig(name="hot"),
                      EventShape.POINT)
    )
    app.create_query("hot-site-1", binder).run()

Every binding problem is reported when the query is created, all at once, each with what is
wrong, where, what was expected, what was given and how to fix it. Argument *types* (a factory
class instead of an instance, a shape that is not an ``EventShape``) fail at once, as in
:meth:`Stream.create`. The binding order of a template's inputs (semantics §4: it breaks ties in
arrival order) is the order of the ``bind_producer`` calls.

A template input has no substream key (semantics §7) until it is bound: an input bound with
``ordering=EventOrderingSettings(over="k")`` makes the template be checked again with that key,
and an operator of the template that loses it (see :class:`~bindings.Stream`) is one of the
binding problems. A ``merge_substreams()`` written in the template counts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ctistream.bindings.stream import Stream
from ctistream.engine._spark import parse_schema
from ctistream.engine.contracts import InputAdapterFactory, OutputAdapterFactory
from ctistream.engine.errors import QueryBuildError
from ctistream.engine.events import EventShape
from ctistream.engine.plan import InputNode, Node, substitute, walk
from ctistream.engine.settings import AdvanceTimeSettings, EventOrderingSettings, Versions

__all__ = ["QueryBinder", "QueryTemplate"]


class QueryTemplate:
    """A query over unbound inputs with one output: StreamInsight's ``QueryTemplate``.

    ``stream`` is the template's output; the unbound inputs it reads (:meth:`Stream.input`) are
    :attr:`inputs`. Inputs bound with :meth:`Stream.create` may be part of it too: every query
    made from the template then reads them with that binding. Make one directly or with
    :meth:`Application.create_query_template`, which also registers it by name.
    """

    def __init__(self, name: str, stream: Stream, description: str = "") -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"template name must be a non-empty string; got {name!r}")
        if not isinstance(stream, Stream):
            raise TypeError(
                f"template {name!r}: expected the template's output Stream; got {stream!r}. "
                "Fix: build it from Stream.input(...) streams, e.g. "
                "QueryTemplate(name, Stream.input('a', 'v double').where('v > 0'))"
            )
        self.name = name
        self.description = description
        self.stream = stream
        self._inputs: dict[str, InputNode] = {}
        self._fixed: dict[str, InputNode] = {}
        for node in sorted(
            (n for n in walk(stream.node) if isinstance(n, InputNode)), key=lambda n: n.order
        ):
            table = self._inputs if not node.bound else self._fixed
            other = self._inputs.get(node.name) or self._fixed.get(node.name)
            if other is not None and other is not node:
                raise QueryBuildError(
                    f"template {name!r} has two different inputs named {node.name!r}; expected "
                    "one input per name. Fix: call Stream.input (or Stream.create) once per "
                    "name and reuse the Stream"
                )
            table[node.name] = node

    @property
    def root(self) -> Node:
        """The template's plan (its output stream's node)."""
        return self.stream.node

    @property
    def inputs(self) -> dict[str, str]:
        """The unbound inputs to bind: name -> declared payload schema (DDL), in declaration
        order."""
        return {n: node.schema or "" for n, node in self._inputs.items()}

    def __repr__(self) -> str:
        return f"QueryTemplate({self.name!r}, inputs={list(self._inputs)})"


@dataclass(frozen=True)
class _Consumer:
    name: str
    factory: OutputAdapterFactory[Any]
    config: Any
    shape: EventShape


class QueryBinder:
    """Binds a :class:`QueryTemplate`'s inputs and output to adapters: StreamInsight's
    ``QueryBinder``. Both methods return the binder, for chaining. Nothing is checked against the
    template until :meth:`Application.create_query`, which reports every problem at once."""

    def __init__(self, template: QueryTemplate) -> None:
        if not isinstance(template, QueryTemplate):
            raise TypeError(
                f"QueryBinder takes a QueryTemplate; got {template!r}. Fix: "
                "QueryBinder(QueryTemplate(name, stream)) or "
                "QueryBinder(app.create_query_template(name, stream))"
            )
        self.template = template
        self._producers: list[InputNode] = []
        self._consumers: list[_Consumer] = []

    def bind_producer(
        self,
        name: str,
        factory: InputAdapterFactory[Any],
        config: Any,
        shape: EventShape,
        advance_time_settings: AdvanceTimeSettings | None = None,
        *,
        ordering: EventOrderingSettings | None = None,
        versions: Versions | None = None,
    ) -> QueryBinder:
        """Bind the template input ``name`` to adapters made by ``factory`` from ``config``,
        producing events of ``shape``; ``advance_time_settings``, ``ordering`` and
        ``versions`` as in :meth:`Stream.create` (the settings override the factory's declared
        ones, and may import another bound input's CTIs)."""
        # Stream.create checks the argument types and stamps the binding order.
        node = Stream.create(
            name,
            factory,
            config,
            shape,
            advance_time_settings,
            ordering=ordering,
            versions=versions,
        ).node
        assert isinstance(node, InputNode)
        self._producers.append(node)
        return self

    def add_consumer(
        self, name: str, factory: OutputAdapterFactory[Any], config: Any, shape: EventShape
    ) -> QueryBinder:
        """Bind the template's output to an output adapter made by ``factory`` from ``config``,
        consuming events of ``shape``. A query has exactly one consumer."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"consumer name must be a non-empty string; got {name!r}")
        if not isinstance(factory, OutputAdapterFactory):
            raise TypeError(
                f"consumer {name!r}: factory must be an OutputAdapterFactory instance; got "
                f"{factory!r}. Fix: pass an instance, e.g. MemoryOutputFactory()"
            )
        if not isinstance(shape, EventShape):
            raise TypeError(f"consumer {name!r}: shape must be an EventShape; got {shape!r}")
        self._consumers.append(_Consumer(name, factory, config, shape))
        return self

    @property
    def producers(self) -> list[str]:
        """The input names bound so far, in binding order."""
        return [n.name for n in self._producers]

    @property
    def consumers(self) -> list[str]:
        """The consumer names added so far."""
        return [c.name for c in self._consumers]

    # -- checking -----------------------------------------------------------------------------
    def _resolve(self, query: str) -> tuple[Node, _Consumer]:
        """The template's plan with every unbound input replaced by its binding, and the one
        consumer. Raises one QueryBuildError listing every binding problem."""
        t = self.template
        unbound, fixed = t._inputs, t._fixed
        names = sorted(unbound)
        problems: list[str] = []
        bindings: dict[str, InputNode] = {}
        for node in self._producers:
            where = f"bind_producer({node.name!r}, {type(node.factory).__name__}(), ...)"
            if node.name in bindings:
                problems.append(
                    f"{where}: input {node.name!r} is bound twice; expected one binding per "
                    "input. Fix: remove one of the bind_producer calls"
                )
                continue
            if node.name not in unbound:
                if node.name in fixed:
                    got = f"{node.name!r} is already bound in the template (Stream.create)"
                    fix = "declare it with Stream.input to bind it here, or drop this call"
                else:
                    got = f"template {t.name!r} has no input {node.name!r}"
                    fix = "bind one of the template's inputs (names are case-sensitive)"
                problems.append(
                    f"{where}: {got}; expected one of its unbound inputs {names}. Fix: {fix}"
                )
                continue
            bindings[node.name] = node
            factory = node.factory
            assert node.shape is not None
            if node.shape not in factory.supported_shapes:
                problems.append(
                    f"{where}: {type(factory).__name__} cannot make {node.shape.value} adapters; "
                    f"expected one of {sorted(s.value for s in factory.supported_shapes)}. Fix: "
                    "bind the input with a supported shape, or use another factory"
                )
        for name in names:
            if name not in bindings:
                problems.append(
                    f"template input {name!r} (declared {unbound[name].schema!r}) is not bound; "
                    f"expected a producer for every input of template {t.name!r}. Fix: "
                    f"binder.bind_producer({name!r}, factory, config, shape)"
                )
            else:
                try:
                    where = f"template input {name!r}, the schema given to Stream.input"
                    parse_schema(unbound[name].schema or "", where)
                except QueryBuildError as bad:
                    problems.append(str(bad))
        for node in bindings.values():
            imp = node.settings.import_settings if node.settings else None
            if imp is None or imp.stream_name in bindings or imp.stream_name in fixed:
                continue
            where = f"bind_producer({node.name!r}, ...)"
            if imp.stream_name in unbound:
                problems.append(
                    f"{where}: imports CTIs from {imp.stream_name!r}, a template input that this "
                    f"binder does not bind; expected the imported input bound too. Fix: "
                    f"bind_producer({imp.stream_name!r}, ...) as well"
                )
            else:
                problems.append(
                    f"{where}: imports CTIs (AdvanceTimeImportSettings) from "
                    f"{imp.stream_name!r}, which is not an input of template {t.name!r}; "
                    f"expected one of {sorted([*unbound, *fixed])}. Fix: import from one of "
                    "those, or add the stream to the template"
                )
        # Substreams (semantics §7): a template input has no key until bound, so an operator of
        # the template that loses a key given here is found now, as at Stream build for inputs
        # bound with Stream.create.
        split = {
            name: node.ordering.over
            for name, node in bindings.items()
            if node.ordering is not None and node.ordering.over is not None
        }
        if split:
            try:
                t.stream._derive(split, {})
            except QueryBuildError as lost:
                calls = ", ".join(
                    f"bind_producer({n!r}, ..., ordering=EventOrderingSettings(over={k!r}))"
                    for n, k in split.items()
                )
                problems.append(
                    f"{calls}: in template {t.name!r}, {lost}; or bind without over= (one "
                    "timeline for the input)"
                )
        consumer = None
        if not self._consumers:
            problems.append(
                f"no consumer: expected exactly one output adapter for template {t.name!r}'s "
                "output. Fix: binder.add_consumer(name, factory, config, shape)"
            )
        elif len(self._consumers) > 1:
            problems.append(
                f"{len(self._consumers)} consumers {self.consumers}: expected exactly one; a "
                "query has one output. Fix: keep one add_consumer call; for another output make "
                "a second binder and query from the same template"
            )
        else:
            consumer = self._consumers[0]
            supported = consumer.factory.supported_shapes
            if consumer.shape not in supported:
                problems.append(
                    f"add_consumer({consumer.name!r}, {type(consumer.factory).__name__}(), ...): "
                    f"cannot consume {consumer.shape.value}; expected one of "
                    f"{sorted(s.value for s in supported)}. Fix: add the consumer with a "
                    "supported shape"
                )
        if problems:
            listed = "\n".join(f"  - {p}" for p in problems)
            raise QueryBuildError(
                f"cannot create query {query!r} from template {t.name!r}: "
                f"{len(problems)} binding problem(s):\n{listed}"
            )
        assert consumer is not None
        replacements: dict[Node, Node] = {
            unbound[name]: replace(node, schema=unbound[name].schema, template=t.name)
            for name, node in bindings.items()
        }
        return substitute(t.root, replacements), consumer

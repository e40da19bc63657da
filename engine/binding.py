"""Binding: a logical plan made into inputs the runtime can read (driver, when a query is built).

:func:`bind` makes each input's adapter, resolves its advance-time settings and payload schema,
orders the inputs so that an input is ingested after the input it imports CTIs from, and runs
the build-time checks (the output adapter's contract, every column the operators name), so a
mistake fails when the query is created, not in an epoch. What it returns is what the planner
(:mod:`engine.physical`) and the runtime (:mod:`engine.runtime`) start from.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from ctistream.engine._spark import parse_schema
from ctistream.engine.columns import check_columns
from ctistream.engine.contracts import InputAdapter, OutputAdapter
from ctistream.engine.errors import QueryBuildError
from ctistream.engine.events import EventShape
from ctistream.engine.ingress import InputSpec, check_versions
from ctistream.engine.ordering import check_ordering
from ctistream.engine.plan import InputNode, Node, walk
from ctistream.engine.schema import check_payload_names, schema_differences
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

__all__ = ["Binding", "BoundInput", "bind", "check_output", "check_read_batches"]


@dataclass
class BoundInput:
    """An input node with its adapter made and its settings resolved (driver)."""

    node: InputNode
    adapter: InputAdapter
    spec: InputSpec
    schema: StructType


@dataclass(frozen=True)
class Binding:
    """A query's bound inputs: ``inputs`` in binding order (``spec.index`` is the position),
    ``order`` the same inputs in import order (an input after the one it imports CTIs from)."""

    inputs: list[BoundInput]
    order: list[BoundInput]


def bind(spark: SparkSession, name: str, root: Node, output: OutputAdapter) -> Binding:
    """Bind query ``name``'s plan under ``root`` and check it (driver, when the query is built):
    raises :class:`QueryBuildError`, with the fix, for an output adapter that does not keep the
    contract, an input bound twice or not at all, a schema the adapter does not agree with, a
    CTI import of an unknown input or in a cycle, and any column an operator names that its
    input does not have."""
    check_output(name, output)
    inputs = _bind_inputs(name, root)
    order = _import_order(name, inputs)
    # every column the operators name, resolved now: a mistake fails here, not in an epoch
    payload = check_columns(spark, root, {id(b.node): b.schema for b in inputs})[id(root)]
    _check_output_names(name, output, payload.fieldNames())
    _check_output_files(name, output, inputs)
    return Binding(inputs, order)


def _bind_inputs(query: str, root: Node) -> list[BoundInput]:
    nodes = sorted((n for n in walk(root) if isinstance(n, InputNode)), key=lambda n: n.order)
    names = [n.name for n in nodes]
    dupes = {x for x in names if names.count(x) > 1}
    if dupes:
        raise QueryBuildError(
            f"query {query!r} binds input name(s) {sorted(dupes)} more than once; expected "
            "one binding per name. Fix: create each input once and reuse the Stream"
        )
    bound = []
    for index, node in enumerate(nodes):
        factory = node.factory
        if not node.bound or node.shape is None:
            raise QueryBuildError(
                f"query {query!r}: input {node.name!r} is an unbound template input "
                "(Stream.input); expected an input bound to an adapter factory. Fix: make a "
                f"QueryTemplate of the stream, bind {node.name!r} with "
                "QueryBinder(template).bind_producer(...) and call app.create_query(name, "
                "binder); or create the input with Stream.create"
            )
        if node.shape not in factory.supported_shapes:
            raise QueryBuildError(
                f"input {node.name!r}: {type(factory).__name__} cannot make {node.shape.value} "
                f"adapters; it supports {sorted(s.value for s in factory.supported_shapes)}. "
                "Fix: bind the input with a supported shape"
            )
        adapter = factory.create(node.config, node.shape)
        check_read_batches(node.name, adapter)
        _check_ends(node.name, adapter)
        adapter.bound_as(node.name)
        declared = factory.declare_advance_time_properties(node.config, node.shape)
        settings = node.settings or (declared.as_binding() if declared is not None else None)
        schema = _payload_schema(query, node, adapter)
        try:
            check_payload_names(schema.fieldNames())
        except ValueError as e:
            raise QueryBuildError(f"input {node.name!r}: {e}") from None
        if node.ordering is not None:  # §7: its watermark replaces the declared generation
            settings = node.settings
            check_ordering(node.name, node.ordering, node.shape, settings, schema)
        if node.versions is not None:
            check_versions(node.name, node.versions, schema)
        partitions = [str(p) for p in adapter.partitions()]
        if not partitions:
            raise QueryBuildError(f"input {node.name!r}: its adapter declares no partitions")
        spec = InputSpec(
            node.name,
            index,
            partitions,
            settings,
            schema.fieldNames(),
            edges=node.shape is EventShape.EDGE or node.versions is not None,
            # versions are read as points and made edges
            points=node.shape is EventShape.POINT and node.versions is None,
            ordering=node.ordering,
            versions=node.versions,
        )
        bound.append(BoundInput(node, adapter, spec, schema))
    return bound


def _payload_schema(query: str, node: InputNode, adapter: InputAdapter) -> StructType:
    """The binding's ``schema=`` override; else the adapter's own; for a template input the
    template's declaration, which the adapter's own (if it declares one) must agree with."""
    given = f"input {node.name!r} of query {query!r}, " + (
        "its schema= in Stream.create"
        if node.template is None
        else f"the schema template {node.template!r} declares for it (Stream.input)"
    )
    if node.schema and node.template is None:
        return parse_schema(node.schema, given)
    own = adapter.payload_schema()
    declared_by = (
        f"input {node.name!r} of query {query!r}, the payload schema its "
        f"{type(adapter).__name__} declares (its config's schema, or the adapter's own)"
    )
    if node.template is None or node.schema is None:
        if own is None:
            raise QueryBuildError(
                f"input {node.name!r} of query {query!r}: {type(adapter).__name__} "
                "declares no payload schema and the binding gives none. Fix: pass schema= "
                "(Spark DDL) to Stream.create, or declare it in the adapter factory"
            )
        return parse_schema(own, declared_by)
    declared = parse_schema(node.schema, given)
    if own is not None:
        diffs = schema_differences(declared, parse_schema(own, declared_by))
        if diffs:
            raise QueryBuildError(
                f"query {query!r}: input {node.name!r} of template {node.template!r} is "
                f"declared as {node.schema!r}, but {type(node.factory).__name__} makes "
                f"adapters with payload {own!r}: {'; '.join(diffs)}. Fix: declare the "
                "template input with the adapter's schema, or configure the adapter to "
                "produce the declared one (e.g. give it an explicit schema)"
            )
    return declared


def _import_order(query: str, inputs: list[BoundInput]) -> list[BoundInput]:
    by_name = {b.spec.name: b for b in inputs}
    source: dict[str, str] = {}
    for b in inputs:
        imp = b.spec.settings.import_settings if b.spec.settings else None
        if imp is None:
            continue
        if imp.stream_name not in by_name:
            raise QueryBuildError(
                f"input {b.spec.name!r} imports CTIs from {imp.stream_name!r}, which is not "
                f"an input of query {query!r}; its inputs are {sorted(by_name)}. Fix: use "
                "that stream in the query (e.g. join or union it), or import from one of these"
            )
        if imp.stream_name == b.spec.name:
            raise QueryBuildError(
                f"input {b.spec.name!r} imports CTIs from itself; expected another input of "
                f"query {query!r}, whose CTIs it follows (its inputs are {sorted(by_name)}). Fix: "
                "import from the fast stream it is looked up against, or give it CTIs of its "
                "own (AdvanceTimeSettings(generation=AdvanceTimeGenerationSettings(...)))"
            )
        source[b.spec.name] = imp.stream_name
    order: list[BoundInput] = []
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in done:
            return
        if name in path:
            raise QueryBuildError(
                f"CTI imports form a cycle: {' -> '.join([*path, name])}. Fix: let at least "
                "one of these inputs generate its own CTIs instead of importing them"
            )
        if name in source:
            visit(source[name], [*path, name])
        done.add(name)
        order.append(by_name[name])

    for b in inputs:
        visit(b.spec.name, [])
    return order


def check_output(name: str, output: OutputAdapter) -> None:
    """Refuse, when the query is built and with the fix, an output adapter that would receive
    items it holds again or fail mid-run: one that defines ``delivered_through()`` (progress per
    epoch) instead of :meth:`OutputAdapter.progress`, or whose ``deliver`` takes no ``first``."""
    kind = type(output)
    if hasattr(kind, "delivered_through") and kind.progress is OutputAdapter.progress:
        raise QueryBuildError(
            f"query {name!r}: {kind.__name__} defines delivered_through(), which the engine does "
            "not call; expected progress() -> int or None, how many of the query's output "
            "items the output holds (output progress is tracked per item: an epoch that failed "
            "part-way is completed after a restart). Fix: rename it to progress(), record "
            "first + len(items) with what deliver(epoch, items, first) writes, and return it"
        )
    try:
        inspect.signature(output.deliver).bind(0, [], 0)
    except TypeError:
        raise QueryBuildError(
            f"query {name!r}: {kind.__name__}.deliver does not take (epoch, items, first); "
            "expected deliver(epoch, items, first) as ctistream.OutputAdapter declares it, "
            "first being the number of items[0] among the query's output items. Fix: add the "
            "parameter 'first'; an adapter that records progress records first + len(items) "
            "and returns it from progress()"
        ) from None


def _check_output_names(name: str, output: OutputAdapter, payload: list[str]) -> None:
    """Refuse a payload column named as one of the fields the output writes beside the payload
    (:attr:`OutputAdapter.own_fields`): its value and the output's would be one field."""
    own = list(output.own_fields)
    clash = next((c for c in payload if c in own), None)
    if clash is None:
        return
    raise QueryBuildError(
        f"query {name!r}: its payload column {clash!r} has the name of a field "
        f"{type(output).__name__} writes beside each event's payload ({own}); expected payload "
        f"columns named otherwise (the payload: {payload}). Fix: rename it at the end of the "
        f"query, e.g. .select(..., F.col({clash!r}).alias({clash + '_value'!r})), or configure "
        "the output's own fields with other names where it allows"
    )


def _check_output_files(name: str, output: OutputAdapter, inputs: list[BoundInput]) -> None:
    """Refuse an output that writes a file one of the query's inputs reads
    (:attr:`OutputAdapter.files`, :meth:`InputAdapter.reads_file`): a run, or a restart,
    would read the query's own output back as input."""
    for b in inputs:
        written = next((f for f in output.files if b.adapter.reads_file(f)), None)
        if written is None:
            continue
        raise QueryBuildError(
            f"query {name!r}: its output writes {written!r}, which input {b.spec.name!r} reads "
            "(or would read once it exists), so the query would read its own output back as "
            "input; expected an output outside the input's files. Fix: write the output to "
            "another directory, or narrow the input's path (a glob such as 'in/*.jsonl')"
        )


def _check_ends(name: str, adapter: InputAdapter) -> None:
    """An adapter that does not end (``bounded`` False) must say how far its partitions have
    come (:meth:`InputAdapter.latest_offsets`): the engine reads a source without offsets to its
    end, so no epoch over one that never ends would complete."""
    if adapter.bounded or type(adapter).latest_offsets is not InputAdapter.latest_offsets:
        return
    raise QueryBuildError(
        f"input {name!r}: {type(adapter).__name__} does not end (bounded is False) and cannot "
        "say how far its partitions have come (it has no latest_offsets()), so the engine would "
        "read it to an end that never comes and no epoch would complete; expected an input "
        "that ends, or one that reports its partitions' end offsets as a broker does. Fix: "
        "put the feed behind a broker (ctistream.adapters.kafka or .eventhubs) and read that, "
        "or make the adapter end its input (bounded True: a push adapter calls stopped())"
    )


def check_read_batches(name: str, adapter: InputAdapter) -> None:
    """An adapter's own ``read_batches`` must take ``until`` (the engine passes it on every
    read): fail when the query is built, not on an executor mid-run."""
    if "until" in inspect.signature(adapter.read_batches).parameters:
        return
    raise QueryBuildError(
        f"input {name!r}: {type(adapter).__name__}.read_batches(partition, start_offset, "
        "payload) does not take the keyword 'until'; expected read_batches(partition, "
        "start_offset, payload, until=None), as ctistream.InputAdapter declares it. Fix: "
        "add 'until=None' to the override and pass it on to super().read_batches (or stop "
        "after the first item stamped at or after it)"
    )

"""The files of a :class:`~adapters.files.FileInputConfig` read as ONE source partition.

``FileInputFactory`` makes every file a partition, and the input's CTI is the minimum over its
partitions (semantics §3.5). When the files are consecutive segments of one stream (micro-batch
files, as here) that minimum is held by the files that have not started yet (-inf) and by the
files that have ended (their last CTI, unless the input flushes on stop), so the input's CTI
never passes the end of the first file. Native Spark's file source has one watermark over all
files. This adapter chains the files in sorted order as one partition (offsets run on across
files, one END at the end), which is the nearest equivalent. It reads each file with
``FileInputAdapter`` itself (``read_batches``, the engine's read path, and ``read``), so it is
exactly as fast per row as the stock adapter; only the files are read one after the other. A read
from an offset opens the files before it for their row counts only (Parquet metadata).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
from ctistream.adapters.files import FileInputAdapter, FileInputConfig, FileInputFactory
from ctistream.engine.contracts import ItemKind, SourceItem
from ctistream.engine.events import EventShape

ALL = "all-files"


class OnePartitionFileAdapter(FileInputAdapter):
    def partitions(self) -> Sequence[str]:
        return [ALL]

    def _paths(self) -> Sequence[str]:
        return super().partitions()

    def read(self, partition: str, start_offset: int) -> Iterator[SourceItem]:
        if partition != ALL:  # a file, when FileInputAdapter falls back to rows
            yield from super().read(partition, start_offset)
            return
        base, arrival = 0, 0
        for path in self._paths():
            for item in super().read(path, 0):
                if item.kind is ItemKind.END:
                    base, arrival = base + item.offset, max(arrival, item.arrival)
                elif base + item.offset >= start_offset:
                    yield SourceItem(item.kind, base + item.offset, item.arrival, item.event)
        yield SourceItem(ItemKind.END, base, arrival)

    def read_batches(
        self, partition: str, start_offset: int, payload: Any, until: Any = None
    ) -> Iterator[Any]:
        if partition != ALL:
            yield from super().read_batches(partition, start_offset, payload, until)
            return
        base, end = 0, None
        paths = self._paths()
        for k, path in enumerate(paths):
            n = pq.read_metadata(path).num_rows
            if k < len(paths) - 1 and base + n <= start_offset:
                base += n  # every row before the start (only the last file's END is read)
                continue
            for batch in super().read_batches(path, max(0, start_offset - base), payload):
                is_end = pc.equal(batch.column("__kind"), ItemKind.END.value)
                if pc.any(is_end).as_py():
                    end = batch.filter(is_end)
                    batch = batch.filter(pc.invert(is_end))
                batch = _shift_offsets(batch, base)
                batch = batch.filter(pc.greater_equal(batch.column("__off"), start_offset))
                if batch.num_rows:
                    yield batch
            assert end is not None, f"no END item read from {path}"
            base += end.column("__off")[0].as_py()
        yield _shift_offsets(end, base - end.column("__off")[0].as_py())


def _shift_offsets(batch: Any, by: int) -> Any:
    i = batch.schema.get_field_index("__off")
    return batch.set_column(i, batch.schema.field(i), pc.add(batch.column(i), by))


class OnePartitionFileFactory(FileInputFactory):
    def create(self, config: FileInputConfig, shape: EventShape) -> OnePartitionFileAdapter:
        return OnePartitionFileAdapter(config, shape)

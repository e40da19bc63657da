"""Pictures of time, apart from the temporal core: the recorder of a traced run and its timeline.

* :class:`Trace` (:mod:`ctistream.viz.trace`): the run's observer
  (:class:`ctistream.engine.observer.RunObserver`); ``query.run(trace=True)`` makes one, and
  ``query.trace`` reads what it recorded. Needs only Spark.
* :class:`Timeline` (:mod:`ctistream.viz.timeline`): the picture of a trace, event time against
  arrival time; ``query.timeline()`` makes one. Its HTML page needs nothing more; its PNG needs
  matplotlib, which only the ``viz`` extra installs (``pip install "ctistream[viz]"``) and which
  is imported only when a PNG is drawn (without it, :meth:`Timeline.png` raises ImportError
  saying so).

The engine imports nothing from here: it calls the observer it is given.
"""

from ctistream.viz.timeline import Timeline, require_matplotlib
from ctistream.viz.trace import Trace, TraceItem

__all__ = ["Timeline", "Trace", "TraceItem", "require_matplotlib"]

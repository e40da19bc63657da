"""Benchmarks: the engine side by side with native Spark Structured Streaming on the same data.

``python -m benchmarks.run --help``. ``data`` writes the inputs; ``engine_side`` and ``native``
run B1/B2 on each side; ``sink`` is the engine's counting output adapter; ``one_partition`` reads
the micro-batch files as one source partition; ``memory`` samples a process tree's peak memory;
``jobs`` counts Spark jobs per epoch. ``latency`` runs a started Kafka-to-Kafka query on both
sides (the native one reads Kafka through ``kafka_source``, a Python data source); ``steps`` and
``workers`` take a started query's step apart.
"""

import os

# Spark binds to the machine's first non-loopback address unless told otherwise; the benchmarks'
# only network is 127.0.0.1
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

"""Kafka records as Arrow: the schemas of Spark's Kafka source (``schema``) and the column
builder that decodes v2 record batches straight into ``pyarrow.RecordBatch`` objects of them
(``builder``, over the C decoder ``_columnar`` or its pure-Python twin, chosen by ``codec``).

Below the tier's readers (``tierlog.reader``) and the topic tables' conversion
(``tierlog.remote.table.convert``), which both decode segments through it.
"""

"""Reading the committed tier of a partition: its chain of readable segments, its transactions
(last stable offset, aborted ranges) and ReadSplit, one batch-aligned byte range decoded into
Arrow. Below the tier's readers (``tierlog.reader``, Spark) and beside the topic tables'
conversion (``tierlog.remote.table.convert``), which reads a chain link the same way.
"""

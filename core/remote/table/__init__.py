"""Topics as tables (issue 23): each topic's Iceberg table kept in the remote tier, under
``_tables/<topic>-<topicId>/``, committed with pyiceberg through the tier's own catalog.

``catalog`` (TierCatalog: a commit is the exclusive create of the next metadata file),
``file_io`` (pyiceberg's FileIO over the tier), ``coverage`` (which offsets a snapshot holds).
pyiceberg is imported only by this room. The tiering run writes the tables
(``tierlog.remote.rlm.table_step``).
"""

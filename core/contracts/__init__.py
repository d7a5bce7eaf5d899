"""The plugin contracts (Kafka's ``storage/api``, which sits below ``storage``): what a plugin
registers through the hooks, named by :mod:`tierlog.hookspecs` and typed in the registries of
:mod:`tierlog.plugin_manager`, so those two name nothing above them.

Each contract names only what lies below it (records, the config, the errors, the leaf helpers)
and keeps its public name in the room that uses it: ``tierlog.index.index_types``,
``tierlog.cleaner.policy``, ``tierlog.remote.api`` and ``tierlog.remote.metadata_api``.
"""

"""Test-only plugins registered by the plugin tests."""

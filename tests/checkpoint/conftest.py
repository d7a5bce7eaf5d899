"""The checkpoint room (checkpoint files and their codec, partition.metadata): nothing of its
own to share; ``kafka_logdir`` (files a real broker wrote) comes from tests/conftest.py."""

"""The records room (batches, codecs, compression, varints, file records, interop with
kafka-python and aiokafka): nothing of its own to share; the real Kafka 3.7 log directory
(``kafka_logdir``) and the fake ``clock`` come from tests/conftest.py."""

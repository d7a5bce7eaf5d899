"""Kafka's listener settings (tierlog.security.listeners): parsing, Kafka's defaults, the
checks KafkaConfig makes, and each listener's view of the config (``listener.name.<l>.``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import ConfigError
from tierlog.security.listeners import (
    DEFAULT_LISTENERS,
    Listener,
    ListenerSettings,
    advertised_listeners,
    inter_broker_listener,
    listener_config,
    parse_listeners,
    parse_protocol_map,
    sasl_jaas_config,
    unprefixed,
)

NAMED = {
    "listeners": "INTERNAL://10.0.0.5:9093, EXTERNAL://:9094,SASL_SSL://[::1]:9095",
    "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    "inter.broker.listener.name": "internal",
}


def test_the_defaults_are_kafkas_with_a_loopback_listener() -> None:
    assert parse_protocol_map({}) == {p: p for p in
                                      ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
    settings = ListenerSettings.from_config({})
    only = Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")
    assert settings == ListenerSettings((only,), (only,), only)
    assert str(only) == DEFAULT_LISTENERS


def test_listener_names_are_not_only_protocols() -> None:
    settings = ListenerSettings.from_config(NAMED)
    assert settings.listeners == (
        Listener("INTERNAL", "10.0.0.5", 9093, "SSL"),
        Listener("EXTERNAL", "", 9094, "SASL_PLAINTEXT"),  # empty host: every interface
        Listener("SASL_SSL", "::1", 9095, "SASL_SSL"))
    assert settings.inter_broker == settings.listeners[0]
    assert str(settings.listeners[2]) == "SASL_SSL://[::1]:9095"
    assert settings.listeners[0].config_prefix == "listener.name.internal."


def test_the_inter_broker_listener_defaults_to_the_one_named_after_the_protocol() -> None:
    config = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"}
    assert inter_broker_listener(config).name == "PLAINTEXT"
    assert inter_broker_listener({**config, "security.inter.broker.protocol": "SSL"}).name == "SSL"


def test_advertised_listeners_default_to_listeners_and_may_narrow_them() -> None:
    config = {"listeners": "PLAINTEXT://0.0.0.0:9092,SSL://0.0.0.0:9093",
              "advertised.listeners": "PLAINTEXT://broker1.example.com:19092"}
    assert advertised_listeners(config) == [
        Listener("PLAINTEXT", "broker1.example.com", 19092, "PLAINTEXT")]
    assert inter_broker_listener(config).host == "broker1.example.com"
    assert advertised_listeners({"listeners": config["listeners"]}) == parse_listeners(config)


@pytest.mark.parametrize(("config", "key", "words"), [
    ({"listeners": "PLAINTEXT://:9092", "listener.security.protocol.map": "PLAINTEXT:TLS"},
     "listener.security.protocol.map", "'TLS'"),
    ({"listener.security.protocol.map": "PLAINTEXT"}, "listener.security.protocol.map",
     "'PLAINTEXT'"),
    ({"listener.security.protocol.map": "A:SSL,a:PLAINTEXT"}, "listener.security.protocol.map",
     "mapped twice"),
    ({"listeners": "CLIENT://:9092"}, "listeners", "'CLIENT' has no security protocol"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9092"}, "listeners", "port 9092"),
    ({"listeners": "PLAINTEXT://:9092,plaintext://:9093"}, "listeners", "'PLAINTEXT'"),
    ({"listeners": "PLAINTEXT://localhost"}, "listeners", "'PLAINTEXT://localhost'"),
    ({"listeners": "localhost:9092"}, "listeners", "'localhost:9092'"),
    ({"listeners": "PLAINTEXT://:99999"}, "listeners", "99999"),
    ({"listeners": "PLAINTEXT://::1:9092"}, "listeners", "brackets"),
    ({"listeners": "PLAIN.TEXT://:9092"}, "listeners", "'PLAIN.TEXT'"),
    ({"listeners": "PLAINTEXT://bad host:9092"}, "listeners", "'bad host'"),
    ({"listeners": " , "}, "listeners", "no listener"),
    ({"advertised.listeners": "SSL://x:9093"}, "advertised.listeners", "'SSL' is not among"),
    ({"listeners": "PLAINTEXT://0.0.0.0:9092", "advertised.listeners": "PLAINTEXT://0.0.0.0:9092"},
     "advertised.listeners", "non-routable"),
    ({"inter.broker.listener.name": "REPLICATION"}, "inter.broker.listener.name",
     "'REPLICATION' is not among"),
    ({"listeners": "SSL://:9093"}, "security.inter.broker.protocol", "'PLAINTEXT' is not among"),
    ({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"},
     "inter.broker.listener.name", "only one of"),
    ({"security.inter.broker.protocol": "TLS"}, "security.inter.broker.protocol", "'TLS'"),
])
def test_bad_listener_settings_are_config_errors_naming_key_and_value(
        config: dict[str, str], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        ListenerSettings.from_config(config)
    assert e.value.key == key
    assert words in str(e.value)


def test_ports_may_repeat_only_for_port_zero_or_an_ipv4_ipv6_pair() -> None:
    ephemeral = parse_listeners({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"})
    assert [x.port for x in ephemeral] == [0, 0]
    pair = parse_listeners({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9092"})
    assert [x.host for x in pair] == ["127.0.0.1", "::1"]  # KIP-797
    with pytest.raises(ConfigError, match="different port"):
        parse_listeners({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://10.0.0.1:9092"})


def test_a_listener_prefixed_key_wins_over_the_plain_key() -> None:
    config = {"ssl.keystore.location": "/plain.pem", "ssl.client.auth": "required",
              "listener.name.internal.ssl.keystore.location": "/internal.pem",
              "listener.name.external.ssl.keystore.location": "/external.pem",
              "listener.name.internal.ssl.truststore.location": "/ca.pem",
              "log.dirs": "/data"}
    internal = Listener("INTERNAL", "", 9093, "SSL")
    assert listener_config(config, internal) == {
        "ssl.keystore.location": "/internal.pem", "ssl.client.auth": "required",
        "ssl.truststore.location": "/ca.pem", "log.dirs": "/data"}
    other = listener_config(config, Listener("OTHER", "", 9095, "SSL"))
    assert other["ssl.keystore.location"] == "/plain.pem"
    assert not any(key.startswith("listener.name.") for key in other)


def test_ssl_client_auth_reaches_a_sasl_ssl_listener_only_listener_prefixed() -> None:
    sasl_ssl = Listener("SASL_SSL", "", 9094, "SASL_SSL")
    config = {"ssl.client.auth": "required", "ssl.keystore.location": "/k.pem"}
    assert "ssl.client.auth" not in listener_config(config, sasl_ssl)  # KIP-684
    prefixed = {**config, "listener.name.sasl_ssl.ssl.client.auth": "requested"}
    assert listener_config(prefixed, sasl_ssl)["ssl.client.auth"] == "requested"


def test_jaas_settings_are_read_per_listener_and_mechanism() -> None:
    listener = Listener("SASL_SSL", "", 9094, "SASL_SSL")
    jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    config = {"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
              "sasl.jaas.config": "a client's, not the broker's"}
    assert sasl_jaas_config(config, listener, "SCRAM-SHA-512") == jaas
    assert sasl_jaas_config(config, listener, "PLAIN") is None
    assert listener_config(config, listener)["scram-sha-512.sasl.jaas.config"] == jaas


def test_unprefixed_strips_a_listener_prefix_only() -> None:
    assert unprefixed("listener.name.sasl_ssl.ssl.key.password") == "ssl.key.password"
    assert unprefixed("ssl.key.password") == "ssl.key.password"
    assert unprefixed("listener.name.x") == "listener.name.x"


_NAMES = st.from_regex(r"[A-Za-z][A-Za-z0-9_-]{0,11}", fullmatch=True)
_HOSTS = st.one_of(st.just(""), st.from_regex(r"[a-z][a-z0-9.-]{0,15}", fullmatch=True),
                   st.ip_addresses().map(str))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(_NAMES, _HOSTS, st.sampled_from(
    ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])), min_size=1, max_size=4,
    unique_by=lambda t: t[0].upper()))
def test_listeners_written_back_parse_to_the_same_listeners(
        drawn: list[tuple[str, str, str]]) -> None:
    config = {"listeners": ",".join(f"{name}://{f'[{host}]' if ':' in host else host}:0"
                                    for name, host, _ in drawn),
              "listener.security.protocol.map": ",".join(f"{name}:{protocol.lower()}"
                                                         for name, _, protocol in drawn)}
    parsed = parse_listeners(config)
    assert parsed == [Listener(name.upper(), host, 0, protocol) for name, host, protocol in drawn]
    assert parse_listeners({**config, "listeners": ",".join(map(str, parsed))}) == parsed

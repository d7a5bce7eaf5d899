"""The one home of the Prometheus names: Kafka's MBeans run through a jmx_exporter rule set.

A Kafka dashboard reads the names the Prometheus jmx_exporter gives Kafka's JMX MBeans, so
tierlog names its metrics by applying the rules of the exporter's example Kafka
configuration, ``examples/kafka-kraft-3_0_0.yml`` of github.com/prometheus/jmx_exporter
(``lowercaseOutputName: true``), exactly as the exporter applies them: each MBean attribute is
written ``domain<key=value, ...><>Attribute: value``, every rule's pattern is matched as
``^.*(?:pattern).*$`` in the file's order, the first match names the sample (``$n`` replaced
by its groups), the name is made safe (runs of other characters than ``[a-zA-Z0-9:_]`` become
one ``_``) and lower-cased, labels are filled the same way. :data:`RULES` holds the rules a
tierlog MBean can reach, in the file's order; the file's others (clientId/brokerHost special
cases, coordinator, raft state and ``-total`` attributes, quotas, ``...Percent``) cannot match
a tierlog MBean before these do. So ``kafka.server:type=BrokerTopicMetrics,
name=BytesInPerSec,topic=t`` (attribute Count) is ``kafka_server_brokertopicmetrics_bytesin_total
{topic="t"}`` and the histogram ``kafka.network:type=RequestMetrics,name=TotalTimeMs,
request=Produce`` is ``kafka_network_requestmetrics_totaltimems{request="Produce",quantile=
"0.99"}`` (milliseconds) with ``..._count``.

tierlog's own metrics (what Kafka has no MBean for) live under ``tierlog.<group>`` domains and
are named by the same rules read with ``tierlog`` in place of ``kafka``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

__all__ = ["RULES", "Exported", "NameTemplate", "Rule", "export", "parse_mbean", "safe_name",
           "template", "with_tags"]

RuleType = Literal["COUNTER", "GAUGE"]


@dataclass(frozen=True, slots=True)
class Rule:
    """One jmx_exporter rule: ``pattern``, the ``name`` and ``labels`` templates, ``type``."""

    pattern: str
    name: str
    type: RuleType
    labels: tuple[tuple[str, str], ...] = ()
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # As jmx_exporter compiles a rule: anywhere in the bean's string, the whole string.
        object.__setattr__(self, "regex", re.compile(f"^.*(?:{self.pattern}).*$"))


_PAIR = (("$4", "$5"),)
_PAIRS = (("$4", "$5"), ("$6", "$7"))

#: The rules of examples/kafka-kraft-3_0_0.yml (prometheus/jmx_exporter, commit 526f4757)
#: that a tierlog MBean can reach, in the file's order.
RULES: tuple[Rule, ...] = (
    # KRaft rules for attribute-named metrics of kafka.server (socket-server-metrics, ...)
    Rule(r"kafka.server<type=(.+)><>([a-z-]+)", "kafka_server_$1_$2", "GAUGE"),
    # Generic per-second counters with 0-2 key/value pairs
    Rule(r"kafka.(\w+)<type=(.+), name=(.+)PerSec\w*, (.+)=(.+), (.+)=(.+)><>Count",
         "kafka_$1_$2_$3_total", "COUNTER", _PAIRS),
    Rule(r"kafka.(\w+)<type=(.+), name=(.+)PerSec\w*, (.+)=(.+)><>Count",
         "kafka_$1_$2_$3_total", "COUNTER", _PAIR),
    Rule(r"kafka.(\w+)<type=(.+), name=(.+)PerSec\w*><>Count", "kafka_$1_$2_$3_total",
         "COUNTER"),
    # Generic gauges with 0-2 key/value pairs
    Rule(r"kafka.(\w+)<type=(.+), name=(.+), (.+)=(.+), (.+)=(.+)><>Value", "kafka_$1_$2_$3",
         "GAUGE", _PAIRS),
    Rule(r"kafka.(\w+)<type=(.+), name=(.+), (.+)=(.+)><>Value", "kafka_$1_$2_$3", "GAUGE",
         _PAIR),
    Rule(r"kafka.(\w+)<type=(.+), name=(.+)><>Value", "kafka_$1_$2_$3", "GAUGE"),
    # Emulate Prometheus 'Summary' metrics for the exported 'Histogram's
    Rule(r"kafka.(\w+)<type=(.+), name=(.+), (.+)=(.+), (.+)=(.+)><>Count",
         "kafka_$1_$2_$3_count", "COUNTER", _PAIRS),
    Rule(r"kafka.(\w+)<type=(.+), name=(.+), (.+)=(.*), (.+)=(.+)><>(\d+)thPercentile",
         "kafka_$1_$2_$3", "GAUGE", (*_PAIRS, ("quantile", "0.$8"))),
    Rule(r"kafka.(\w+)<type=(.+), name=(.+), (.+)=(.+)><>Count", "kafka_$1_$2_$3_count",
         "COUNTER", _PAIR),
    Rule(r"kafka.(\w+)<type=(.+), name=(.+), (.+)=(.*)><>(\d+)thPercentile", "kafka_$1_$2_$3",
         "GAUGE", (*_PAIR, ("quantile", "0.$6"))),
    Rule(r"kafka.(\w+)<type=(.+), name=(.+)><>Count", "kafka_$1_$2_$3_count", "COUNTER"),
    Rule(r"kafka.(\w+)<type=(.+), name=(.+)><>(\d+)thPercentile", "kafka_$1_$2_$3", "GAUGE",
         (("quantile", "0.$4"),)),
)

_OWN = "tierlog"
_UNSAFE = re.compile(r"[^a-zA-Z0-9:_]+|_+")
_GROUP = re.compile(r"\$(\d)")
_MBEAN = re.compile(r"^(?P<domain>[A-Za-z][\w.]*):(?P<props>[^:]+)$")


@dataclass(frozen=True, slots=True)
class Exported:
    """What a rule makes of one MBean attribute: the sample's name, labels and type."""

    name: str
    labels: tuple[tuple[str, str], ...]
    type: RuleType


def safe_name(text: str) -> str:
    """jmx_exporter's toSafeName: each run of ``_`` and characters outside ``[a-zA-Z0-9:_]``
    becomes one ``_``; a leading digit gets a ``_`` before it."""
    safe = _UNSAFE.sub("_", text)
    return "_" + safe if safe[:1].isdigit() else safe


def parse_mbean(text: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``"kafka.log:type=Log,name=Size,topic=t"`` -> (domain, ((key, value), ...)) in the
    order written (which is the order jmx_exporter matches); ValueError naming the text."""
    match = _MBEAN.match(text)
    pairs = [p.partition("=") for p in match["props"].split(",")] if match else []
    if match is None or not pairs or any(not k or not sep for k, sep, _ in pairs):
        raise ValueError(f"not an MBean name of the form domain:key=value,...: {text!r}")
    return match["domain"], tuple((k, v) for k, _, v in pairs)


def _expand(match: re.Match[str], template_: str) -> str:
    return _GROUP.sub(lambda g: match.group(int(g[1])) or "", template_)


@lru_cache(maxsize=4096)
def export(mbean: str, attribute: str) -> Exported | None:
    """The sample jmx_exporter makes of attribute ``attribute`` of ``mbean`` under
    :data:`RULES` (None: no rule matches, the exporter leaves it out)."""
    domain, props = parse_mbean(mbean)
    own = domain == _OWN or domain.startswith(_OWN + ".")
    if own:
        domain = "kafka" + domain[len(_OWN):]
    bean = "{}<{}><>{}: 0".format(domain, ", ".join(f"{k}={v}" for k, v in props), attribute)
    for rule in RULES:
        match = rule.regex.match(bean)
        if match is None:
            continue
        name = safe_name(_expand(match, rule.name)).lower()
        if own and name.startswith("kafka"):
            name = _OWN + name[len("kafka"):]
        labels = tuple((safe_name(_expand(match, k)), _expand(match, v)) for k, v in rule.labels)
        return Exported(name, tuple((k, v) for k, v in labels if k and v), rule.type)
    return None


@dataclass(frozen=True, slots=True)
class NameTemplate:
    """The export of one attribute of every MBean of a name with the same tag keys: the name
    and, per label, the index of the tag whose value it carries (or a constant)."""

    name: str
    type: RuleType
    labels: tuple[tuple[str, int | str], ...]

    def labels_for(self, values: Sequence[str]) -> dict[str, str]:
        return {k: values[v] if isinstance(v, int) else v for k, v in self.labels}


_TOKEN = "tierlogtag{}x"


def template(mbean: str, tag_keys: Sequence[str], attribute: str) -> NameTemplate | None:
    """:func:`export` for every tag value at once, found by exporting placeholder values;
    None when no rule matches or the name depends on a tag's value (export each then)."""
    tokens = [_TOKEN.format(i) for i in range(len(tag_keys))]
    tags = "".join(f",{k}={t}" for k, t in zip(tag_keys, tokens, strict=True))
    exported = export(mbean + tags, attribute)
    if exported is None or any(t in exported.name for t in tokens):
        return None
    labels: list[tuple[str, int | str]] = []
    for key, value in exported.labels:
        if value in tokens:
            labels.append((key, tokens.index(value)))
        elif any(t in value for t in tokens):
            return None
        else:
            labels.append((key, value))
    return NameTemplate(exported.name, exported.type, tuple(labels))


def with_tags(mbean: str, tags: Mapping[str, str]) -> str:
    """``mbean`` with ``tags`` appended in order (Kafka's MBean name of one sample)."""
    return mbean + "".join(f",{k}={v}" for k, v in tags.items())

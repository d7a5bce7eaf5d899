"""The remote tier's storage options: one set of names, parsed once and translated once into the
filesystem's constructor arguments, for every front door (the writer's plugins, the reader's
``open_tier``, Spark's ``storage.*``), plus secret masking for logs, reprs and errors.

A broker config carries the options as ``remote.storage.options.<name>`` or, as Kafka names
them, ``rsm.config.<name>``; Spark as ``storage.<name>`` (or ``fsspec.<name>``); the reader takes
the names bare. Values may be typed or text (from a ``.properties`` file): each option has a
kind that says how text is read (``true``/``false``, an integer, a JSON object).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from tierlog.common.secrets import MASK, is_secret, mask_credential_logs
from tierlog.config import parse_float, parse_int
from tierlog.errors import ConfigError

_T = TypeVar("_T")

OPTIONS_PREFIX = "remote.storage.options."
#: Kafka's prefix for the RemoteStorageManager's own configs: an alias of OPTIONS_PREFIX.
RSM_CONFIG_PREFIX = "rsm.config."
CONFIG_PREFIXES = (OPTIONS_PREFIX, RSM_CONFIG_PREFIX)
#: Spark data source option prefixes (``fsspec.`` is the older alias).
SPARK_PREFIXES = ("storage.", "fsspec.")


#: S3's multipart limits: parts of 5 MiB to 5 GiB (the last part may be smaller).
MIN_PART_SIZE = 5 << 20
MAX_PART_SIZE = 5 << 30


def mask_secrets(options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``options`` with every secret-looking value replaced by ``***`` (also inside
    nested objects such as ``client_kwargs``)."""
    return {k: _masked(k, v) for k, v in options.items()}


def _masked(name: str, value: object) -> object:
    if value is None:
        return None
    if is_secret(name):
        return MASK
    if isinstance(value, Mapping):
        return mask_secrets(value)
    if isinstance(value, str) and value.lstrip()[:1] == "{":
        # An object given as JSON text (client_kwargs from a .properties file).
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            return MASK if is_secret(value) else value
        return json.dumps(mask_secrets(decoded)) if isinstance(decoded, dict) else value
    return value


class MaskedOptions(Mapping[str, Any]):
    """A read-only mapping of storage options whose repr and str mask the secrets (what
    ``ManagerConfig.remote_storage_options`` is): the values themselves are untouched."""

    __slots__ = ("_options",)

    def __init__(self, options: Mapping[str, Any]) -> None:
        self._options = dict(options)

    def __getitem__(self, name: str) -> Any:  # noqa: ANN401 - each backend's own value types
        return self._options[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._options)

    def __len__(self) -> int:
        return len(self._options)

    def masked(self) -> dict[str, Any]:
        return mask_secrets(self._options)

    def __repr__(self) -> str:
        return f"MaskedOptions({self.masked()!r})"

    __str__ = __repr__


# -- option kinds --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """One storage option of a backend."""

    name: str
    kind: str
    """str, bool, int, float, object (a dict, or its JSON text) or bool_or_str."""
    doc: str
    minimum: int | None = None
    maximum: int | None = None


def _value_error(where: str, raw: object, expected: str) -> ConfigError:
    shown = "" if is_secret(where) else f", got {raw!r}"
    return ConfigError(where, f"must be {expected}{shown}")


def _as_str(spec: OptionSpec, where: str, raw: object) -> str:
    if not isinstance(raw, str):
        raise _value_error(where, raw, "a string")
    return raw


def _as_bool(spec: OptionSpec, where: str, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise _value_error(where, raw, "true or false")


def _as_bool_or_str(spec: OptionSpec, where: str, raw: object) -> bool | str:
    """A bool, its text, or any other text (a CA bundle path)."""
    if isinstance(raw, str) and raw.strip() and raw.strip().lower() not in ("true", "false"):
        return raw.strip()
    try:
        return _as_bool(spec, where, raw)
    except ConfigError:
        raise _value_error(where, raw, "true, false or a CA bundle path") from None


def _as_int(spec: OptionSpec, where: str, raw: object) -> int:
    try:
        value = parse_int(where, raw)
    except ConfigError:
        raise _value_error(where, raw, "an integer") from None
    if spec.minimum is not None and value < spec.minimum:
        raise ConfigError(where, f"must be at least {spec.minimum}, got {value}")
    if spec.maximum is not None and value > spec.maximum:
        raise ConfigError(where, f"must be at most {spec.maximum}, got {value}")
    return value


def _as_float(spec: OptionSpec, where: str, raw: object) -> float:
    try:
        return parse_float(where, raw)
    except ConfigError:
        raise _value_error(where, raw, "a number") from None


def _as_object(spec: OptionSpec, where: str, raw: object) -> dict[str, object]:
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as e:  # the text may hold credentials: not echoed
            raise ConfigError(where, f"must be a JSON object ({e.msg} at character "
                                     f"{e.pos})") from None
    if not isinstance(value, Mapping):
        raise ConfigError(where, f"must be a JSON object, got a {type(value).__name__}")
    return dict(value)


#: How each option kind reads a typed value or its text (ConfigError naming the key).
_COERCE: Mapping[str, Callable[[OptionSpec, str, object], object]] = {
    "str": _as_str, "bool": _as_bool, "bool_or_str": _as_bool_or_str, "int": _as_int,
    "float": _as_float, "object": _as_object,
}


def _coerce(spec: OptionSpec, where: str, raw: object) -> object:
    coerce = _COERCE.get(spec.kind)
    if coerce is None:
        raise AssertionError(f"unknown option kind {spec.kind!r}")
    return coerce(spec, where, raw)


def _specs(*specs: OptionSpec) -> Mapping[str, OptionSpec]:
    return {spec.name: spec for spec in specs}


#: The ``s3`` backend's options (S3, MinIO and other S3-compatible stores, through s3fs).
S3_OPTIONS = _specs(
    OptionSpec("endpoint_url", "str", "An S3-compatible endpoint, e.g. http://minio:9000."),
    OptionSpec("key", "str", "Access key id (with secret)."),
    OptionSpec("secret", "str", "Secret access key (with key)."),
    OptionSpec("token", "str", "Session token of temporary credentials."),
    OptionSpec("profile", "str", "A profile of the shared AWS config/credentials files."),
    OptionSpec("anon", "bool", "Unsigned requests (a public bucket)."),
    OptionSpec("region", "str", "The bucket's region (botocore region_name)."),
    OptionSpec("use_ssl", "bool", "Use HTTPS when endpoint_url does not say (default true)."),
    OptionSpec("verify", "bool_or_str",
               "Check the server's TLS certificate: true, false, or a CA bundle path."),
    OptionSpec("client_kwargs", "object", "More botocore client arguments (JSON object)."),
    OptionSpec("config_kwargs", "object",
               'botocore Config arguments, e.g. {"s3": {"addressing_style": "path"}}.'),
    OptionSpec("s3_additional_kwargs", "object", "Arguments added to every S3 request."),
    OptionSpec("part_size", "int", "Multipart part size in bytes.", MIN_PART_SIZE,
               MAX_PART_SIZE),
    OptionSpec("storage_class", "str", "StorageClass of uploaded objects."),
    OptionSpec("server_side_encryption", "str",
               "ServerSideEncryption of written objects: AES256, aws:kms or aws:kms:dsse."),
    OptionSpec("sse_kms_key_id", "str",
               "SSEKMSKeyId (a key id, ARN or alias/...) with server_side_encryption=aws:kms."),
    OptionSpec("requester_pays", "bool", "Send x-amz-request-payer."),
    OptionSpec("version_aware", "bool", "Read object versions."),
    OptionSpec("cache_regions", "bool", "Find each bucket's region."),
    OptionSpec("max_concurrency", "int", "Concurrent part transfers.", 1),
    OptionSpec("fixed_upload_size", "bool", "Upload parts of exactly part_size."),
    OptionSpec("default_cache_type", "str", "fsspec cache type of opened files."),
    OptionSpec("default_fill_cache", "bool", "Keep read data in the file cache."),
    OptionSpec("use_listings_cache", "bool", "Cache directory listings."),
    OptionSpec("listings_expiry_time", "float", "Seconds a cached listing lives."),
    OptionSpec("skip_instance_cache", "bool", "Build a new filesystem, not fsspec's cached one."),
    OptionSpec("connect_timeout", "float",
               "Seconds botocore waits to connect (s3fs's default 5)."),
    OptionSpec("read_timeout", "float",
               "Seconds botocore waits for a response's bytes (s3fs's default 15)."),
)
#: The ``local`` backend's options.
LOCAL_OPTIONS = _specs(
    OptionSpec("fsync", "bool", "Make every published object survive a power cut (default "
                                "true)."),
)
#: Options that name the request (S3 object settings) rather than the filesystem.
_S3_REQUEST_OPTIONS = {"storage_class": "StorageClass",
                       "server_side_encryption": "ServerSideEncryption",
                       "sse_kms_key_id": "SSEKMSKeyId"}
#: S3's ServerSideEncryption values: SSE-S3, SSE-KMS and dual-layer SSE-KMS.
SSE_ALGORITHMS = ("AES256", "aws:kms", "aws:kms:dsse")
#: The algorithms that take a KMS key id (SSEKMSKeyId).
KMS_ALGORITHMS = ("aws:kms", "aws:kms:dsse")
#: Options that are botocore client arguments.
_S3_CLIENT_OPTIONS = {"region": "region_name", "verify": "verify"}
#: Options that are botocore Config arguments (s3fs puts them in its config_kwargs).
_S3_CONFIG_OPTIONS = ("connect_timeout", "read_timeout")
#: Options that are not filesystem arguments at all (the writer's own settings).
_S3_WRITER_OPTIONS = ("part_size",)

BACKENDS: Mapping[str, Mapping[str, OptionSpec]] = {"s3": S3_OPTIONS, "local": LOCAL_OPTIONS}
_SCHEMES = {"s3": "s3", "s3a": "s3", "": "local", "file": "local", "local": "local"}


def backend_for_url(url: str) -> str:
    """``s3`` for s3:// and s3a:// URLs, ``local`` for file:// URLs and plain paths, else the
    URL's scheme (an fsspec protocol whose options tierlog passes through unchecked)."""
    scheme = urlsplit(url).scheme.lower()
    if len(scheme) == 1:  # a Windows drive letter, not a scheme
        scheme = ""
    return _SCHEMES.get(scheme, scheme)


def local_directory(url: str) -> str:
    """The directory a local tier URL (``file://...`` or a plain path) names."""
    return urlsplit(url).path if "://" in url else url


# -- parsing -------------------------------------------------------------------------------


def parse_options(backend: str, options: Mapping[str, Any], *,
                  prefix: str = OPTIONS_PREFIX) -> dict[str, Any]:
    """The options of ``backend`` (``s3``, ``local``, or another fsspec protocol) with typed
    values. An unknown name or a bad value is a ConfigError naming ``prefix + name``; neither
    the error nor anything logged shows a secret's value. Options of a backend tierlog does not
    know are passed through, text ``true``/``false``/``null`` and JSON objects decoded."""
    specs = BACKENDS.get(backend)
    parsed: dict[str, Any] = {}
    for name, raw in options.items():
        where = prefix + name
        if specs is None:
            parsed[name] = _decode_text(raw)
            continue
        spec = specs.get(name)
        if spec is None:
            raise _unknown_option(backend, specs, where, name, prefix)
        if raw is None:
            continue
        parsed[name] = _coerce(spec, where, raw)
    if backend == "s3":
        _check_credentials(parsed, prefix)
        _check_request_options(parsed, prefix)
        _check_encryption(parsed, prefix)
    return parsed


def _unknown_option(backend: str, specs: Mapping[str, OptionSpec], where: str, name: str,
                    prefix: str) -> ConfigError:
    """The error of an unknown option; ``client_kwargs.region_name`` (a flat form of an object
    option) is told how the object is written."""
    head, _, tail = name.partition(".")
    spec = specs.get(head)
    if tail and spec is not None and spec.kind == "object":
        return ConfigError(where, f"{prefix}{head} is one JSON object: write "
                                  f"{prefix}{head}={{\"{tail}\": ...}}")
    return ConfigError(where, f"unknown option of the {backend} remote storage; known "
                              f"options: {', '.join(sorted(specs))}")


def _check_request_options(parsed: Mapping[str, Any], prefix: str) -> None:
    """A request setting given both by its option (``server_side_encryption``) and inside
    ``s3_additional_kwargs`` (``ServerSideEncryption``) must say the same thing."""
    extra = parsed.get("s3_additional_kwargs") or {}
    for name, argument in _S3_REQUEST_OPTIONS.items():
        if name in parsed and argument in extra and extra[argument] != parsed[name]:
            raise ConfigError(prefix + name, f"is {parsed[name]!r} but "
                                             f"{prefix}s3_additional_kwargs sets {argument} to "
                                             f"{extra[argument]!r}: set it in one place")


def _check_encryption(parsed: Mapping[str, Any], prefix: str) -> None:
    """Server-side encryption is one of S3's algorithms, and a KMS key id comes with a KMS
    algorithm (S3 refuses every upload otherwise: the mistake is reported at startup)."""
    extra = parsed.get("s3_additional_kwargs") or {}
    where = "server_side_encryption" if "server_side_encryption" in parsed \
        else "s3_additional_kwargs"
    algorithm = parsed.get("server_side_encryption", extra.get("ServerSideEncryption"))
    if algorithm is not None and algorithm not in SSE_ALGORITHMS:
        raise ConfigError(prefix + where, f"server-side encryption must be one of "
                                          f"{', '.join(SSE_ALGORITHMS)}, got {algorithm!r}")
    key_id = parsed.get("sse_kms_key_id", extra.get("SSEKMSKeyId"))
    if key_id is not None and algorithm not in KMS_ALGORITHMS:
        where = "sse_kms_key_id" if "sse_kms_key_id" in parsed else "s3_additional_kwargs"
        raise ConfigError(prefix + where, f"a KMS key id needs {prefix}server_side_encryption="
                                          f"aws:kms (or aws:kms:dsse), got {algorithm!r}")


def _decode_text(raw: object) -> object:
    if not isinstance(raw, str):
        return raw
    stripped = raw.strip()
    if stripped in ("true", "false", "null") or stripped[:1] in ("{", "["):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            return raw
    return raw


def _check_credentials(parsed: Mapping[str, Any], prefix: str) -> None:
    """Static credentials come as key and secret together (a token only with both)."""
    has_key, has_secret = bool(parsed.get("key")), bool(parsed.get("secret"))
    if has_key and not has_secret:
        raise ConfigError(prefix + "secret", f"is missing: {prefix}key is set, so add "
                                             f"{prefix}secret (the secret access key)")
    if has_secret and not has_key:
        raise ConfigError(prefix + "key", f"is missing: {prefix}secret is set, so add "
                                          f"{prefix}key (the access key id)")
    if parsed.get("token") and not has_key:
        raise ConfigError(prefix + "key", f"is missing: {prefix}token is set, so add "
                                          f"{prefix}key and {prefix}secret")


def require_s3_credentials(parsed: Mapping[str, Any], *, prefix: str = OPTIONS_PREFIX) -> None:
    """ConfigError saying which settings to add when S3 requests could not be signed: no
    key/secret, profile or anon, and botocore finds nothing in the environment, the shared
    AWS files or the instance metadata."""
    if parsed.get("anon") or parsed.get("key") or parsed.get("profile"):
        return
    try:
        import botocore.session
    except ImportError:  # s3fs itself will say what is missing
        return
    if botocore.session.Session().get_credentials() is None:
        raise ConfigError(
            prefix + "key",
            f"no S3 credentials found: add {prefix}key and {prefix}secret (or {prefix}profile, "
            f"or {prefix}anon=true for a public bucket, or set AWS_ACCESS_KEY_ID and "
            f"AWS_SECRET_ACCESS_KEY)")


# -- translation ---------------------------------------------------------------------------


def s3fs_kwargs(parsed: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments of ``s3fs.S3FileSystem`` from parsed ``s3`` options: ``region`` and
    ``verify`` go into botocore's ``client_kwargs``, the object settings into
    ``s3_additional_kwargs``, ``part_size`` becomes ``default_block_size``."""
    kwargs: dict[str, Any] = {}
    client = dict(parsed.get("client_kwargs") or {})
    extra = dict(parsed.get("s3_additional_kwargs") or {})
    config = dict(parsed.get("config_kwargs") or {})
    for name, value in parsed.items():
        if name in _S3_CONFIG_OPTIONS:
            config[name] = value
        elif name == "config_kwargs":
            continue
        elif name in _S3_CLIENT_OPTIONS:
            client[_S3_CLIENT_OPTIONS[name]] = value
        elif name in _S3_REQUEST_OPTIONS:
            extra[_S3_REQUEST_OPTIONS[name]] = value
        elif name == "part_size":
            kwargs["default_block_size"] = value
        elif name not in ("client_kwargs", "s3_additional_kwargs"):
            kwargs[name] = value
    if client:
        kwargs["client_kwargs"] = client
    if extra:
        kwargs["s3_additional_kwargs"] = extra
    if config:
        kwargs["config_kwargs"] = config
    return kwargs


def filesystem_kwargs(url: str, options: Mapping[str, Any] | None, *,
                      prefix: str = "") -> dict[str, Any]:
    """What a reader passes to fsspec for the tier at ``url``: the options parsed for the URL's
    backend (S3 credentials checked, botocore's DEBUG lines masked) and translated (``local`` needs none; other protocols get
    them as given). Errors name ``prefix + name``."""
    backend = backend_for_url(url)
    parsed = parse_options(backend, options or {}, prefix=prefix)
    if backend == "s3":
        require_s3_credentials(parsed, prefix=prefix)
        mask_credential_logs()
        return s3fs_kwargs(parsed)
    if backend == "local":
        return {}
    return parsed


def options_under(prefixes: Iterable[str], values: Mapping[str, Any]) -> dict[str, Any]:
    """The storage options among ``values`` (keys under any of ``prefixes``, which are
    aliases): ConfigError when a name is empty or is given twice under different prefixes
    with different values (neither value is shown)."""
    found: dict[str, tuple[str, Any]] = {}
    for key, raw in values.items():
        prefix = next((p for p in prefixes if key.startswith(p)), None)
        if prefix is None:
            continue
        name = key[len(prefix):]
        if not name:
            raise ConfigError(key, "an option name must follow the prefix")
        if name in found and found[name][1] != raw:
            raise ConfigError(key, f"conflicts with {found[name][0]} (the same option, "
                                   f"set twice with different values)")
        found[name] = (key, raw)
    return {name: raw for name, (_, raw) in found.items()}


class StorageOptions:
    """A third-party plugin's view of its options (the prefix already removed), with typed
    getters that name the key in a ConfigError. Construction fails on any option not in
    ``known``. Getters accept the typed value or its text. Immutable; the repr masks secrets."""

    def __init__(self, backend: str, options: Mapping[str, Any], known: Iterable[str]) -> None:
        known_names = frozenset(known)
        for name in options:
            if name not in known_names:
                raise ConfigError(
                    OPTIONS_PREFIX + name,
                    f"unknown option for the {backend} remote storage; known options: "
                    f"{', '.join(sorted(known_names))}",
                )
        self._backend = backend
        self._options = dict(options)

    def __repr__(self) -> str:
        return f"StorageOptions({self._backend!r}, {mask_secrets(self._options)!r})"

    def _get(self, name: str, coerce: Callable[[OptionSpec, str, object], _T], kind: str,
             **limits: int | None) -> _T | None:
        raw = self._options.get(name)
        if raw is None:
            return None
        return coerce(OptionSpec(name, kind, "", **limits), OPTIONS_PREFIX + name, raw)

    def get_str(self, name: str, default: str | None = None) -> str | None:
        value = self._get(name, _as_str, "str")
        return default if value is None else value

    def get_int(self, name: str, default: int | None = None, *, minimum: int | None = None,
                maximum: int | None = None) -> int | None:
        value = self._get(name, _as_int, "int", minimum=minimum, maximum=maximum)
        return default if value is None else value

    def get_bool(self, name: str, default: bool) -> bool:
        value = self._get(name, _as_bool, "bool")
        return default if value is None else value

"""The lake location: one setting, three forms, parsed and refused in one place."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from cdc_platform.config import Settings, load_settings
from cdc_platform.lake_location import (
    LOCAL_S3_SECRET_KEY,
    S3Settings,
    parse_location,
    resolve_s3_access,
    scrub,
)
from simple_binlog.errors import ConfigError

BASE = Path("/srv/cdc")


@pytest.mark.parametrize(
    ("text", "kind", "uri"),
    [
        ("/data/lake", "local", "file:///data/lake"),
        ("/data/lake/", "local", "file:///data/lake"),
        ("lake", "local", "file:///srv/cdc/lake"),
        ("./var/lake", "local", "file:///srv/cdc/var/lake"),
        ("file:///data/lake", "local", "file:///data/lake"),
        ("file:/data/lake", "local", "file:///data/lake"),
        ("hdfs://nn1.corp:8020/warehouse/cdc", "hdfs", "hdfs://nn1.corp:8020/warehouse/cdc"),
        ("hdfs://127.0.0.1:28020/", "hdfs", "hdfs://127.0.0.1:28020"),
        ("s3://cdc-lake/prod/lake/", "s3", "s3://cdc-lake/prod/lake"),
        ("s3a://cdc-lake", "s3", "s3://cdc-lake"),
    ],
)
def test_each_form_parses_to_one_uri(text: str, kind: str, uri: str) -> None:
    location = parse_location(text, BASE)
    assert (location.kind, location.uri) == (kind, uri)


def test_parts_of_each_form() -> None:
    hdfs = parse_location("hdfs://nn1:8020/lake", BASE)
    assert (hdfs.host, hdfs.port) == ("nn1", 8020)
    s3 = parse_location("s3://cdc-lake/x", BASE)
    assert s3.bucket == "cdc-lake" and s3.child("db.db", "t") == "s3://cdc-lake/x/db.db/t"
    assert parse_location("/a/b", BASE).local_path == Path("/a/b")
    with pytest.raises(ValueError, match="not an S3 location"):
        _ = hdfs.bucket


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "is empty"),
        ("gs://bucket/lake", "unsupported scheme 'gs://'"),
        ("hdfs://namenode/lake", "hdfs://host:port/path"),
        ("hdfs://nn:99999/lake", "invalid port"),
        ("hdfs://user:pw@nn:8020/lake", "must not carry credentials"),
        ("file://user:pw@host/lake", "must not carry credentials"),
        ("s3://AKIA:SECRET@bucket/lake", "must not carry credentials"),
        ("s3://Bad_Bucket/lake", "valid bucket name"),
        ("s3://b/lake", "valid bucket name"),
        ("s3://bucket/a/../b", "must not contain"),
        ("/data/../lake", "must not contain '..'"),
        ("file://otherhost/lake", "remote host"),
    ],
)
def test_a_bad_location_is_refused_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse_location(text, BASE)


@pytest.mark.parametrize(
    "location", ["s3://AKIAEXAMPLE:hunter2@bucket/lake", "gs://x:hunter2@bucket/lake"]
)
def test_credentials_in_a_location_are_never_echoed_in_the_config_error(
    location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CDC_MIRROR_LAKE__LOCATION", location)
    with pytest.raises(ConfigError) as raised:
        load_settings()
    sentence = str(raised.value)
    assert sentence.startswith("config field 'lake.location' is invalid: ")
    assert "must not carry credentials" in sentence and "hunter2" not in sentence


def test_the_default_is_the_local_lake_folder() -> None:
    settings = Settings()
    assert settings.lake_location.kind == "local"
    assert settings.lake_location.local_path == settings.lake_dir


def test_the_local_stack_secret_is_refused_for_a_remote_endpoint() -> None:
    with pytest.raises(ValidationError) as raised:
        S3Settings(endpoint="https://s3.eu-west-1.amazonaws.com")
    assert "not on this machine" in str(raised.value)
    assert LOCAL_S3_SECRET_KEY not in str(raised.value)


@pytest.mark.parametrize(
    "endpoint", ["http://127.example.com:28333", "http://localhost.example.com", "http://10.0.0.7"]
)
def test_the_local_stack_secret_is_refused_for_a_name_that_only_looks_local(endpoint: str) -> None:
    # A host name starting with "127." resolves wherever its DNS says: not this machine.
    with pytest.raises(ValidationError) as raised:
        S3Settings(endpoint=endpoint)
    assert "not on this machine" in str(raised.value)


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://127.0.0.1:28333",
        "http://127.0.0.2:28333",
        "http://[::1]:28333",
        "http://localhost:28333",
    ],
)
def test_the_local_stack_secret_is_kept_for_a_loopback_endpoint(endpoint: str) -> None:
    assert S3Settings(endpoint=endpoint).endpoint == endpoint


@pytest.mark.parametrize("endpoint", ["ftp://host", "host:8333", "http://k:s@host:8333"])
def test_an_endpoint_must_be_a_plain_http_url(endpoint: str) -> None:
    with pytest.raises(ValidationError):
        S3Settings(endpoint=endpoint, secret_access_key=SecretStr("real"))


def test_s3_access_prefers_the_config_then_the_aws_variables_then_the_defaults() -> None:
    env = {
        "AWS_ACCESS_KEY_ID": "AKIAENV",
        "AWS_SECRET_ACCESS_KEY": "env-secret",
        "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL_S3": "https://s3.example.net",
    }
    defaults = resolve_s3_access(S3Settings(), {})
    assert defaults.endpoint == "http://127.0.0.1:28333" and defaults.region == "us-east-1"
    from_env = resolve_s3_access(S3Settings(), env)
    assert from_env.endpoint == "https://s3.example.net" and from_env.region == "eu-west-1"
    assert from_env.secrets() == ("AKIAENV", "env-secret")
    configured = S3Settings(
        endpoint=None,
        region="us-west-2",
        access_key_id=SecretStr("AKIACFG"),
        secret_access_key=SecretStr("cfg-secret"),
    )
    chosen = resolve_s3_access(configured, env)
    assert (chosen.endpoint, chosen.region) == (None, "us-west-2")
    assert chosen.secrets() == ("AKIACFG", "cfg-secret")


def test_scrub_removes_every_secret() -> None:
    assert scrub("key AKIA secret s3cr3t s3cr3t!", ("s3cr3t", "AKIA")) == "key *** secret *** ***!"

from __future__ import annotations


import pytest
import yaml

from rag_monitor.collectors import DialectSettings, IngestLimits, TraceAssembler
from rag_monitor.config_files import shipped_path



def test_shipped_ingest_yaml_matches_defaults():
    """The file documents the defaults: loading it changes nothing."""
    path = shipped_path("ingest_config")
    assert IngestLimits.load(path) == IngestLimits()
    assert DialectSettings.from_mapping(yaml.safe_load(path.read_text())) == DialectSettings()


def test_overrides_and_partial_files(tmp_path):
    path = tmp_path / "ingest.yaml"
    path.write_text("limits:\n  max_body_bytes: 1024\n")
    limits = IngestLimits.load(path, root_timeout_s=5)
    assert (limits.max_body_bytes, limits.root_timeout_s, limits.max_attribute_chars) == (1024, 5, 32 * 1024)
    assembler = TraceAssembler.from_limits(limits)
    assert assembler.root_timeout_s == 5


@pytest.mark.parametrize("text,match", [("limits:\n  max_body_byte: 1\n", "max_body_byte"), ("limits:\n  max_body_bytes: -1\n", "positive"),
                                         ("limits:\n  max_body_bytes: lots\n", "lots"), ("- 1\n", "mapping")])
def test_bad_files_raise_with_the_key(tmp_path, text, match):
    path = tmp_path / "ingest.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        IngestLimits.load(path)


def test_bad_mapping_key():
    with pytest.raises(ValueError, match="doc_keys"):
        DialectSettings.from_mapping({"mapping": {"doc_keys": ["x"]}})

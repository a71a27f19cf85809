from __future__ import annotations

import pytest

from kernelwright.strategies import RegimeError, parse_regime


def test_specs_parse_and_round_trip():
    c = parse_regime("agentic+no_retrieval+n=8+single_turn")
    assert c.name == "agentic" and c.n == 8 and c.has("no_retrieval") and c.has("single_turn")
    assert parse_regime(c.spec) == c


@pytest.mark.parametrize("bad", ["", "telepathy", "agentic+no_brain", "agentic+n=two", "agentic+depth=3"])
def test_bad_specs_are_one_line_errors(bad):
    with pytest.raises(RegimeError) as e:
        parse_regime(bad)
    assert "\n" not in str(e.value)


def test_config_hash_changes_with_what_matters():
    a, b = parse_regime("agentic"), parse_regime("agentic+n=2")
    assert a.config_hash("m") != b.config_hash("m") != a.config_hash("other")
    assert a.config_hash("m") == parse_regime("agentic").config_hash("m")


def test_scaffold_default_and_overrides():
    assert parse_regime("zero_shot").scaffold is False
    assert parse_regime("zero_shot", scaffold=True).scaffold is True  # the CLI's default for embedded models
    assert parse_regime("zero_shot+no_scaffold", scaffold=True).scaffold is False
    on = parse_regime("iterative+scaffold+turns=2")
    assert on.scaffold and on.spec == "iterative+scaffold+turns=2"
    assert on.config_hash("m") != parse_regime("iterative+turns=2").config_hash("m")


def test_embedded_models_get_scaffolds_by_default():
    from kernelwright.llm.registry import is_embedded

    assert is_embedded(None) and is_embedded("qwen2.5-coder-0.5b")
    assert not is_embedded("openai:http://localhost:8000/v1=some-model")

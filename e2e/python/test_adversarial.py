"""The adversarial pass (adversarial.py): ~1500 cases over every op rcpu claims, each run with ORT's CPU EP
and with rcpu in child processes. No case may crash, hang, answer wrongly, refuse what ORT computes,
accept what ORT refuses at run time, or fail with an rcpu error that does not name the node."""

from __future__ import annotations

import json

import adversarial


# Known and explained, not fixed (see each reason); every entry must still be a finding.
KNOWN: dict[str, str] = {}


def test_adversarial_pass(plugin_path):
    cases = adversarial.all_cases()
    assert len(cases) >= 500
    results = adversarial.run_all(cases, str(plugin_path))
    counts = adversarial.summary(results)
    findings = [r for r in results if r["class"] in adversarial.FINDINGS]
    unexpected = [r for r in findings if r["name"] not in KNOWN]
    assert not unexpected, f"{counts}\n" + "\n".join(json.dumps(r)[:700] for r in unexpected)
    # The pass must really exercise rcpu: most cases compute on it and agree with ORT.
    assert counts.get("agree", 0) >= len(cases) // 2, counts
    stale = set(KNOWN) - {r["name"] for r in findings}
    assert not stale, f"KNOWN entries no longer found (remove them): {sorted(stale)}"

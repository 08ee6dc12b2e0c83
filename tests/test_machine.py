"""Runs that say where they ran: the machine tags a run sets, the reader's record of them, the report header's
distinct machines and a claim whose runs mix CPU capabilities or base models (fake stores, no training)."""

from __future__ import annotations

import json

import torch
from fake_sweep import FakeRun, write_sweep

from harness.analysis.claims import judge
from harness.analysis.verdict_table import verdict_rows
from harness.config.claims import Claim
from harness.runs.layout import (
    BASE_MODEL_SHA256_TAG,
    CPU_CAPABILITY_TAG,
    CPU_FAMILY_TAG,
    CPU_MODEL_TAG,
    CPU_PATH_ENV_TAG,
    CPU_VENDOR_TAG,
    GPU_TAG,
    TORCH_THREADS_TAG,
    TORCH_VERSION_TAG,
    machine_tags,
)
from harness.runs.reader import reader_for, sweeps
from harness.runs.sweep_data import RunMachine, read_sweep
from report.build import build
from report.render import to_html, to_json, to_latex, to_markdown
from trainer.models.fingerprint import Machine, file_sha256, gpu_name, weights_sha256

LEN = "train/length_incorrect_mean"
SHA_A, SHA_B = "a" * 64, "b" * 64


def _tags(capability: str, sha: str = SHA_A, threads: int = 1) -> dict[str, str]:
    return machine_tags(Machine("AMD EPYC 7B13", capability, "2.6.0", threads), sha)


def _data(tmp_path, runs, claims=None):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    spec = {"name": "fake", "claims": claims} if claims else None
    write_sweep(uri, runs, spec=spec)
    reader = reader_for(uri)
    return read_sweep(reader, sweeps(reader.runs())[0])


def test_machine_tags_are_read_after_the_threads_are_set(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if before != 1 else 2)  # as the engine applies train.threads, then reads the machine
        tags = machine_tags(Machine.here(), weights_sha256(tmp_path), gpu_name("cpu"))
        threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    here = Machine.here()
    assert tags == {
        CPU_MODEL_TAG: here.cpu_model,
        CPU_VENDOR_TAG: here.cpu_vendor,
        CPU_FAMILY_TAG: here.cpu_family,
        CPU_PATH_ENV_TAG: here.cpu_path_env,
        CPU_CAPABILITY_TAG: torch.backends.cpu.get_cpu_capability(),
        TORCH_VERSION_TAG: torch.__version__,
        TORCH_THREADS_TAG: str(threads),
        BASE_MODEL_SHA256_TAG: file_sha256(tmp_path / "model.safetensors"),
    }  # no GPU tag on a CPU run
    assert machine_tags(Machine("x", "AVX2", "2.6.0", 4), "", "NVIDIA H100")[GPU_TAG] == "NVIDIA H100"
    assert RunMachine.of(tags) == RunMachine(
        tags[CPU_MODEL_TAG],
        tags[CPU_CAPABILITY_TAG],
        torch.__version__,
        threads,
        tags[BASE_MODEL_SHA256_TAG],
        cpu_vendor=here.cpu_vendor,
        cpu_family=here.cpu_family,
        cpu_path_env=here.cpu_path_env,
    )


def test_the_cpu_vendor_and_family_come_from_proc_cpuinfo_and_say_where_bits_may_part(monkeypatch, tmp_path):
    from trainer.models import fingerprint

    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 106\n"
        "model name\t: Intel(R) Xeon(R) CPU @ 2.50GHz\n\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\n"
    )
    real = fingerprint.Path
    monkeypatch.setattr(fingerprint, "Path", lambda p: info if p == "/proc/cpuinfo" else real(p))
    assert fingerprint.cpu_id() == ("GenuineIntel", "6/106")
    amd = RunMachine("AMD EPYC", "AVX2", "2.13.0+cpu", 1, "ab" * 32)  # logged before the vendor tag: from its name
    intel = RunMachine("Intel(R) Xeon(R) CPU @ 2.50GHz", "AVX2", "2.13.0+cpu", 1, "ab" * 32, cpu_vendor="GenuineIntel")
    assert amd.vendor == "AuthenticAMD" and amd.bits_differ(amd) == ""
    assert intel.bits_differ(amd) == "CPU vendor GenuineIntel vs AuthenticAMD"
    zen3 = RunMachine("AMD EPYC", "AVX2", "2.13.0+cpu", 1, "ab" * 32, cpu_vendor="AuthenticAMD", cpu_family="25/1")
    zen4 = RunMachine("AMD EPYC", "AVX512", "2.13.0+cpu", 1, "cd" * 32, cpu_vendor="AuthenticAMD", cpu_family="25/17")
    assert zen3.bits_differ(amd) == "" and zen3.bits_differ(zen4) == (
        "CPU family 25/1 vs 25/17, CPU capability AVX2 vs AVX512, base model abababababab vs cdcdcdcdcdcd"
    )


def test_the_reader_and_the_report_header_list_each_machine(tmp_path):
    runs = [FakeRun("A", s, values={LEN: [1.0 + s]}, tags=_tags("AVX2")) for s in (0, 1, 2)]
    runs += [FakeRun("B", s, values={LEN: [2.0 + s]}, tags=_tags("AVX512", threads=4)) for s in (0, 1)]
    runs.append(FakeRun("B", 2, values={LEN: [4.0]}))  # logged before the tags existed
    data = _data(tmp_path, runs)
    avx2 = RunMachine("AMD EPYC 7B13", "AVX2", "2.6.0", 1, SHA_A)
    assert [(m.machine, m.runs) for m in data.machines] == [
        (avx2, 3),
        (RunMachine("AMD EPYC 7B13", "AVX512", "2.6.0", 4, SHA_A), 2),
        (RunMachine(), 1),
    ]
    report = build(data, metrics=[LEN])
    md = to_markdown(report)
    lines = [line for line in md.splitlines() if line.startswith("- machine")]
    assert lines == [
        "- machine (3 runs): AMD EPYC 7B13, AVX2, torch 2.6.0, 1 thread, base model aaaaaaaaaaaa",
        "- machine (2 runs): AMD EPYC 7B13, AVX512, torch 2.6.0, 4 threads, base model aaaaaaaaaaaa",
        "- machine (1 run): not recorded",
    ]
    assert "<li>machine (2 runs): AMD EPYC 7B13, AVX512, torch 2.6.0, 4 threads" in to_html(report)
    assert "% machine (1 run): not recorded\n" in to_latex(report)
    header = json.loads(to_json(report))["header"]
    assert [(m["machine"]["cpu_capability"], m["runs"]) for m in header["machines"]] == [
        ("AVX2", 3),
        ("AVX512", 2),
        ("", 1),
    ]


def test_a_claim_says_when_its_runs_mix_capabilities_or_base_models(tmp_path):
    runs = [FakeRun("A", s, values={LEN: [10.0 + s]}, tags=_tags("AVX2")) for s in range(3)]
    runs += [FakeRun("B", s, values={LEN: [1.0 + s]}, tags=_tags("AVX2")) for s in range(3)]
    runs += [FakeRun("C", s, values={LEN: [1.0 + s]}, tags=_tags("AVX512", sha=f"{s}" * 64)) for s in range(3)]
    runs[-1].tags.update({CPU_MODEL_TAG: "Intel(R) Xeon(R)", CPU_VENDOR_TAG: "GenuineIntel"})  # a Ray node, say
    runs.append(FakeRun("B", 3, values={LEN: [2.0]}))  # not recorded: no capability or base model of its own
    claims = [
        {"id": id_, "statement": "s.", "metric": LEN, "contrast": {"arm": "A", "vs": vs}, "direction": "increase"}
        for id_, vs in (("same", "B"), ("mixed", "C"))
    ]
    data = _data(tmp_path, runs, claims)
    same, mixed = judge(data, [Claim.model_validate(c) for c in claims])
    assert same.mixed == "" and same.verdict == "reproduced"
    assert mixed.mixed == (
        "runs from 2 CPU vendors (AuthenticAMD, GenuineIntel) and 2 CPU capabilities (AVX2, AVX512) and 4 base models"
    )
    assert mixed.summary().startswith(f"mixed: REPRODUCED [{mixed.mixed}]: ")
    assert [row["verdict"] for row in verdict_rows([same, mixed])] == ["reproduced", f"reproduced [{mixed.mixed}]"]
    assert rf"reproduced \[{mixed.mixed}\]" in to_markdown(build(data, metrics=[LEN], claims=[mixed.claim]))

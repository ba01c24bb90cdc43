"""Inputs that used to crash (a signal) or hang the process, each run in a
subprocess with a timeout: each must now end with a clean Python exception
naming the option, column or file, a non-zero exit and no signal death."""

import os
import subprocess
import sys
import textwrap

import pytest

TIMEOUT_S = 60

PRELUDE = """
import os, sys, time
import numpy as np
import jaxbatch as jb
"""


def run_case(code: str, tmp_path) -> tuple[int, str]:
    script = tmp_path / "case.py"
    script.write_text(PRELUDE + textwrap.dedent(code))
    env = dict(os.environ, JAXBATCH_TMP=str(tmp_path), JAX_PLATFORMS="cpu")
    try:
        done = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=env,
            cwd=tmp_path,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"timed out after {TIMEOUT_S} s (a hang)")
    return done.returncode, done.stderr


def assert_clean_exception(code: str, tmp_path, exception: str, *needles: str) -> None:
    returncode, stderr = run_case(code, tmp_path)
    assert returncode >= 0, f"killed by signal {-returncode}; stderr:\n{stderr}"
    assert returncode != 0, f"exited 0; stderr:\n{stderr}"
    lines = stderr.strip().splitlines()
    assert lines, "no traceback"
    last = lines[-1]
    assert last.startswith(f"{exception}: "), f"expected a {exception}, last line: {last}"
    for needle in needles:
        assert needle in last, f"{needle!r} not in {last!r}"
    assert "Traceback (most recent call last)" in stderr


TRUNCATE = """
path = {path!r}
loader = jb.Loader(path, jb.PadToMax(2), prefetch=1, num_threads=1, shuffle=False)
next(loader)
time.sleep(0.5)  # the worker has collated the next batch and waits
for f in ([path] if os.path.isfile(path) else sorted(os.listdir(path))):
    os.truncate(os.path.join(path, f) if f != path else f, 0)
for batch in loader:
    pass
"""


def test_arrow_file_truncated_while_loading_raises_naming_it(tmp_path):
    import pyarrow as pa
    import pyarrow.feather as feather

    path = tmp_path / "d.arrow"
    tokens = [list(range(i % 50 + 1)) for i in range(400)]
    feather.write_feather(
        pa.table({"t": pa.array(tokens, pa.list_(pa.int64()))}), path, compression="uncompressed"
    )
    code = TRUNCATE.format(path=str(path))
    assert_clean_exception(code, tmp_path, "OSError", str(path), "changed while the loader")


def test_npy_file_truncated_while_loading_raises_naming_it(tmp_path):
    import numpy as np

    folder = tmp_path / "npy"
    folder.mkdir()
    lengths = np.arange(400) % 50 + 1
    np.save(folder / "t.values.npy", np.arange(lengths.sum(), dtype=np.int64))
    np.save(folder / "t.offsets.npy", np.concatenate([[0], np.cumsum(lengths)]))
    code = TRUNCATE.format(path=str(folder))
    assert_clean_exception(code, tmp_path, "OSError", str(folder), "changed while the loader")


def test_dataset_over_np_load_memmap_truncated_while_loading(tmp_path):
    import numpy as np

    lengths = np.arange(400) % 50 + 1
    np.save(tmp_path / "values.npy", np.arange(lengths.sum(), dtype=np.int64))
    code = """
    lengths = np.arange(400) % 50 + 1
    values = np.load("values.npy", mmap_mode="r")
    ds = jb.Dataset.from_arrays({"t": (values, np.concatenate([[0], np.cumsum(lengths)]))})
    loader = jb.Loader(ds, jb.PadToMax(2), prefetch=1, num_threads=1, shuffle=False)
    next(loader)
    time.sleep(0.5)
    os.truncate("values.npy", 0)
    for batch in loader:
        pass
    """
    path = str(tmp_path / "values.npy")
    assert_clean_exception(code, tmp_path, "OSError", path, "changed while the loader")


def test_keeping_every_batch_under_host_memory_limit(tmp_path):
    # Batches of 256 bytes (tokens, mask, lengths, segment ids, positions,
    # example_index): the limit holds 4 of them, the list keeps all 10.
    code = """
    ds = jb.Dataset.from_arrays({"t": [np.arange(k % 4 + 1, dtype=np.int32) for k in range(40)]})
    list(jb.Loader(ds, jb.PadToMax(4), prefetch=1, host_memory_limit=1248))
    """
    assert_clean_exception(code, tmp_path, "RuntimeError", "host_memory_limit=1248 holds")


def test_fifo_named_like_an_arrow_file(tmp_path):
    code = """
    os.mkfifo("x.arrow")
    jb.Loader("x.arrow", jb.PadToMax(4))
    """
    assert_clean_exception(code, tmp_path, "ValueError", "x.arrow is a FIFO")


def test_symlink_loop(tmp_path):
    code = """
    os.symlink("b.arrow", "a.arrow")
    os.symlink("a.arrow", "b.arrow")
    jb.Loader("a.arrow", jb.PadToMax(4))
    """
    assert_clean_exception(code, tmp_path, "OSError", "a.arrow is a symlink loop")


def test_state_with_a_huge_epoch_and_epochs_none(tmp_path):
    code = """
    ds = jb.Dataset.from_arrays({"t": [np.arange(k % 5 + 1) for k in range(30)]})
    state = jb.Loader(ds, jb.PadToMax(4), epochs=None).get_state()
    loader = jb.Loader(ds, jb.PadToMax(4), epochs=None, state={**state, "epoch": 2**63 - 1})
    next(loader)
    """
    assert_clean_exception(
        code, tmp_path, "ValueError", "state's position (epoch 9223372036854775807"
    )


def test_cli_plan_on_blank_lines(tmp_path):
    code = """
    from jaxbatch._src.cli.main import main
    open("blank.txt", "w").write("\\n\\n  \\n")
    sys.exit(main(["plan", "blank.txt"]))
    """
    returncode, stderr = run_case(code, tmp_path)
    assert returncode == 2 and stderr.strip().splitlines()[-1].startswith(
        "jaxbatch plan: blank.txt"
    ), stderr
    assert "Traceback" not in stderr


DATASET = """
ds = jb.Dataset.from_arrays({"t": [np.arange(k % 5 + 1) for k in range(30)]})
"""


def test_pad_to_multiple_near_int64_max(tmp_path):
    code = DATASET + "jb.collate(ds, jb.plan(ds, jb.PadToMax(8, pad_to_multiple=2**60))[0])\n"
    assert_clean_exception(code, tmp_path, "ValueError", "pad_to_multiple")


def test_a_million_threads(tmp_path):
    code = DATASET + "jb.Loader(ds, jb.PadToMax(8), num_threads=10**6)\n"
    assert_clean_exception(code, tmp_path, "ValueError", "num_threads")


# The crafted Arrow files of issue 15 (tests/arrow_craft.py), read each way a
# user reads one: memory-mapped or from memory, as an IPC file or stream, and
# by path through a Loader.
CRAFTED_READS = {
    "mapped": "source = pa.memory_map(path)",
    "in_memory": "source = pa.py_buffer(open(path, 'rb').read())",
}
CRAFTED_READ = """
import pyarrow as pa
path = {path!r}
{source}
reader = pa.ipc.open_stream(source) if {stream} else pa.ipc.open_file(source)
{disable}jb.Dataset.from_arrow(reader.read_all())
"""
# The engine's own check, with Arrow's validation skipped.
WITHOUT_ARROW_VALIDATION = (
    "import jaxbatch._src.data.arrow\n"
    "jaxbatch._src.data.arrow._validated = lambda name, column: None\n"
)


def crafted(tmp_path, make, stream: bool) -> str:
    path = tmp_path / f"crafted.{'stream' if stream else 'file'}.arrow"
    path.write_bytes(make(stream=stream))
    return str(path)


@pytest.mark.parametrize("stream", [False, True], ids=["file", "stream"])
@pytest.mark.parametrize("read", sorted(CRAFTED_READS))
def test_crafted_arrow_list_values_past_their_buffer_are_refused(tmp_path, read, stream):
    from arrow_craft import issue_15_file

    path = crafted(tmp_path, issue_15_file, stream)
    code = CRAFTED_READ.format(path=path, source=CRAFTED_READS[read], stream=stream, disable="")
    assert_clean_exception(
        code, tmp_path, "ValueError", "column 'tokens'", "Buffer #1 too small", "got 40"
    )
    code = CRAFTED_READ.format(
        path=path, source=CRAFTED_READS[read], stream=stream, disable=WITHOUT_ARROW_VALIDATION
    )
    assert_clean_exception(
        code,
        tmp_path,
        "ValueError",
        "column 'tokens', example 0",
        "offsets[1]=5000000",
        "a values buffer of 40 bytes",
    )


@pytest.mark.parametrize("stream", [False, True], ids=["file", "stream"])
def test_crafted_arrow_fixed_column_past_its_buffer_is_refused(tmp_path, stream):
    from arrow_craft import overstated_fixed_file

    path = crafted(tmp_path, overstated_fixed_file, stream)
    for disable, needle in [
        ("", "Buffer #1 too small"),
        (WITHOUT_ARROW_VALIDATION, "the values buffer holds 40 bytes (5 examples)"),
    ]:
        code = CRAFTED_READ.format(
            path=path, source=CRAFTED_READS["mapped"], stream=stream, disable=disable
        )
        assert_clean_exception(code, tmp_path, "ValueError", "column 'label'", needle)


@pytest.mark.parametrize("stream", [False, True], ids=["file", "stream"])
def test_loader_on_a_crafted_arrow_file_names_the_file(tmp_path, stream):
    from arrow_craft import issue_15_file

    path = crafted(tmp_path, issue_15_file, stream)
    code = f"""
    for batch in jb.Loader({path!r}, jb.PadToMax(2), shuffle=False):
        pass
    """
    assert_clean_exception(code, tmp_path, "ValueError", path, "column 'tokens'", "too small")

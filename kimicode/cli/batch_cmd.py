"""`kimicode batch TASKS.jsonl -o RESULTS.jsonl` and `kimicode batch report RESULTS.jsonl`."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from kimicode.config.choices import DEFAULT_MAX_TURNS

EXIT_OK = 0
EXIT_SOME_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class Engine(StrEnum):
    local = "local"
    ray = "ray"


class BatchFormat(StrEnum):
    text = "text"
    stream_json = "stream-json"


class Mode(StrEnum):
    default = "default"
    accept_edits = "accept-edits"
    plan = "plan"
    yolo = "yolo"


def _fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    typer.echo(f"kimicode: {message}", err=True)
    return typer.Exit(code)


def batch(
    tasks_file: Annotated[str, typer.Argument(metavar="TASKS.jsonl", help="One task per line (or: report RESULTS).")],
    report_file: Annotated[str | None, typer.Argument(metavar="[RESULTS.jsonl]", hidden=True)] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Results, one line per task (appended; re-run to resume).")
    ] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", "-j", min=1, help="Tasks at once.")] = 4,
    processes: Annotated[
        int | None,
        typer.Option(
            "--processes",
            min=1,
            help="Local engine: worker processes (default: one per 16 concurrent tasks, at most one per core).",
        ),
    ] = None,
    engine: Annotated[Engine, typer.Option("--engine", help="local (asyncio) or ray.")] = Engine.local,
    address: Annotated[str | None, typer.Option("--address", help="Ray cluster address (default: start one).")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model id (a task's `model` wins).")] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="Endpoint (env KIMI_BASE_URL).")] = None,
    permission_mode: Annotated[
        Mode, typer.Option("--permission-mode", help="For tasks that do not say (default accept-edits).")
    ] = Mode.accept_edits,
    allow: Annotated[list[str] | None, typer.Option("--allow", metavar="RULE", help="Rule for every task.")] = None,
    deny: Annotated[list[str] | None, typer.Option("--deny", metavar="RULE", help="Rule for every task.")] = None,
    max_turns: Annotated[int, typer.Option("--max-turns", min=1, help="Model steps per task.")] = DEFAULT_MAX_TURNS,
    timeout: Annotated[float | None, typer.Option("--timeout", min=1, help="Seconds per task.")] = None,
    max_budget_usd: Annotated[
        float | None, typer.Option("--max-budget-usd", min=0, help="Dollars per task (status budget).")
    ] = None,
    append_system_prompt: Annotated[
        str | None, typer.Option("--append-system-prompt", help="Added to every task's system prompt.")
    ] = None,
    diff: Annotated[bool, typer.Option("--diff", help="Put each task's git diff in its result line.")] = False,
    max_attempts: Annotated[
        int, typer.Option("--max-attempts", min=1, help="Runs of a task that crashes or loses its worker.")
    ] = 3,
    retry_failed: Annotated[
        bool, typer.Option("--retry-failed", help="On resume, also re-run tasks that ended failed.")
    ] = False,
    workdir: Annotated[
        Path | None, typer.Option("--workdir", help="Where task workspaces and homes go (default RESULTS.batch/).")
    ] = None,
    no_session_persistence: Annotated[
        bool, typer.Option("--no-session-persistence", help="Do not write session logs.")
    ] = False,
    checkpoints: Annotated[
        bool, typer.Option("--checkpoints", help="Take workspace checkpoints in each task (for kimicode undo).")
    ] = False,
    project_config: Annotated[
        bool,
        typer.Option(
            "--project-config",
            help="Read each task repository's .kimicode/config.toml and "
            "AGENTS.md (off: a task repository does not choose the model or instructions).",
        ),
    ] = False,
    output_format: Annotated[
        BatchFormat, typer.Option("--output-format", help="text (progress on stderr) or stream-json (stdout).")
    ] = BatchFormat.text,
) -> None:
    """Run many tasks, each in its own workspace; resumable. `kimicode batch report RESULTS.jsonl` re-prints
    the summary."""
    if tasks_file == "report":
        if report_file is None:
            raise _fail("usage: kimicode batch report RESULTS.jsonl")
        raise typer.Exit(report(Path(report_file)))
    if report_file is not None:
        raise _fail(f"unexpected argument {report_file!r} (results go to -o RESULTS.jsonl)")
    if output is None:
        raise _fail("missing -o RESULTS.jsonl (where the results go)")
    from kimicode.batch.tasks import load_tasks

    path = Path(tasks_file)
    if not path.is_file():
        raise _fail(f"no such tasks file: {path}")
    if output.resolve() == path.resolve():
        raise _fail("-o must not be the tasks file")
    tasks, bad = load_tasks(path)
    from kimicode.batch.runner import BatchOptions
    from kimicode.config.choices import DEFAULT_RETRY_BASE_DELAY
    from kimicode.config.endpoint import ConfigError
    from kimicode.config.endpoint import retry_base_delay as env_retry_base_delay

    try:
        retry_base_delay = env_retry_base_delay()
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    if retry_base_delay is None:
        retry_base_delay = DEFAULT_RETRY_BASE_DELAY
    opts = BatchOptions(
        root=(workdir or output.with_name(output.name.removesuffix(".jsonl") + ".batch")).resolve(),
        model=model,
        base_url=base_url,
        permission_mode=permission_mode.value,
        allow=tuple(allow or ()),
        deny=tuple(deny or ()),
        max_turns=max_turns,
        timeout=timeout,
        budget_usd=max_budget_usd,
        append_system_prompt=append_system_prompt,
        diff=diff,
        persist=not no_session_persistence,
        checkpoints=checkpoints,
        project_config=project_config,
        retry_base_delay=retry_base_delay,
    )
    code = asyncio.run(
        _run(
            tasks,
            bad,
            opts,
            output,
            engine.value,
            concurrency,
            max_attempts,
            address,
            retry_failed,
            output_format.value,
            resume_cmd=_resume_command(),
            processes=processes if processes is not None else default_processes(concurrency),
        )
    )
    raise typer.Exit(code)


def default_processes(concurrency: int) -> int:
    """One worker process per 16 concurrent tasks, at most one per core: one event loop keeps up with ~40
    tasks a second, and a process costs a second of start-up, worth it only when it has tasks to share."""
    return max(1, min(os.cpu_count() or 1, concurrency // 16))


def _resume_command() -> str:
    args = [a for a in sys.argv[1:] if a != "--retry-failed"]
    return "kimicode " + " ".join(shlex.quote(a) for a in args)


async def _run(
    tasks: list[Any],
    bad: list[Any],
    opts: Any,
    output: Path,
    engine: str,
    concurrency: int,
    max_attempts: int,
    address: str | None,
    retry_failed: bool,
    fmt: str,
    *,
    resume_cmd: str,
    processes: int = 1,
) -> int:
    from kimicode.batch import run
    from kimicode.batch.results import ResultWriter, finished_ids, read_results
    from kimicode.cli.batch_progress import Progress
    from kimicode.cli.batch_report import print_summary, summarize

    previous, unreadable = read_results(output)
    skip = finished_ids(previous, retry_failed=retry_failed)
    todo = [t for t in tasks if t.id not in skip]
    progress = Progress(len(todo), fmt=fmt, out=sys.stdout, err=sys.stderr, skipped=len(tasks) - len(todo))
    for b in bad:
        progress.note("bad_line", line=b.line, error=b.error, message=f"skipped line {b.line}: {b.error}")
    if unreadable:
        progress.note("note", message=f"{unreadable} unreadable line(s) in {output} (a killed run?) ignored")
    if len(tasks) - len(todo):
        progress.note(
            "resume",
            skipped=len(tasks) - len(todo),
            message=f"{len(tasks) - len(todo)} task(s) already finished in {output}, skipped",
        )
    if not todo and not tasks:
        progress.note("note", message="no tasks to run")
    writer = ResultWriter(output)
    fresh = []
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    stopped: list[str] = []

    def stop(name: str) -> None:
        if not stopped:
            stopped.append(name)
            main.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop, sig.name)
    try:
        with progress:
            try:
                async for result in run(
                    todo,
                    engine=engine,
                    concurrency=concurrency,
                    root=opts.root,
                    processes=processes if engine == "local" else 1,
                    max_attempts=max_attempts,
                    address=address,
                    on_event=progress.event,
                    **_fields(opts),
                ):
                    writer.write(result)
                    fresh.append(result)
                    progress.result(result)
            except asyncio.CancelledError:
                if not stopped:
                    raise
            except (ImportError, ConnectionError) as exc:  # no Ray, or no cluster at --address
                progress.note("error", message=str(exc))
                return EXIT_USAGE
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        writer.close()
    everything = {**previous, **{r.id: r for r in fresh}}
    ran = [everything[t.id] for t in tasks if t.id in everything]
    if stopped:
        left = len(todo) - len(fresh)
        progress.note(
            "interrupted",
            finished=len(fresh),
            left=left,
            resume=resume_cmd,
            message=f"stopped ({stopped[0]}): {len(fresh)} finished, {left} left; resume with: {resume_cmd}",
        )
        return EXIT_INTERRUPTED
    if fmt == "stream-json":
        progress.note("summary", **summarize(ran))
    else:
        print_summary(ran, sys.stderr, color=sys.stderr.isatty())
    return EXIT_OK if all(r.ok for r in ran) and not bad else EXIT_SOME_FAILED


def _fields(opts: Any) -> dict[str, Any]:
    from dataclasses import fields

    return {f.name: getattr(opts, f.name) for f in fields(opts) if f.name != "root"}


def report(path: Path) -> int:
    """Print the summary of a results file again."""
    from kimicode.batch.results import read_results
    from kimicode.cli.batch_report import print_summary

    if not path.is_file():
        typer.echo(f"kimicode: no such results file: {path}", err=True)
        return EXIT_USAGE
    results, unreadable = read_results(path)
    print_summary(results.values(), sys.stdout, color=sys.stdout.isatty())
    if unreadable:
        typer.echo(f"kimicode: {unreadable} unreadable line(s) ignored", err=True)
    return EXIT_OK

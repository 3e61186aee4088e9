"""The judge of Transformer Katas: everything that grades a kata file, and the practice loop.

Commands sit on top (grader.py, practice.py and judge.practice), the engine below them;
dependencies point down only, never back up (tests/test_engine_structure.py checks it).

Engine, importable without torch (the command line stays fast):
    paths       where the project's folders are
    errors      UsageError: bad input to a command, one line, exit status 2
    catalog     info.toml -> validated kata metadata
    stubs       solutions' BEGIN/END SOLUTION regions -> the learners' stubs, strictly
    mutants     tests/mutants/<kata>.toml: slips as patches against the current solution
    protocol    statuses, outcomes, error kinds and the results-file events; KataResult
    limits      the per-kata and per-test limits, in one place
    isolation   running one process under those limits, and killing its whole group
    engines     grading (and timing) one kata file: a fresh process or a warm fork; a grade
                started ahead of the save it judges (make watch)
    shards      one kata's tests split over several judging processes, read back as one run
    verdicts    events + how the process ended -> a KataResult
    scheduling  many katas on several workers, through warm fork servers
    timing      timing passing katas against their PyTorch reference
    reporting   the table, the JSON report, colours
    places      where the learner's kata files and state live
    history     the append-only practice history
    grading     the grader's commands (grade, stubs, table, and the internal ones)
    make_help   make help: the Makefile's targets in the learner's language
    bare        a bare stub for interview mode: imports, signatures, a few lines of task
    interview   an interview's grade: the math only, then the conventions listed
    learning    learning paths, the review ladder, the next kata

In the kata process (imports torch):
    plugin      the pytest plugin: options, limits, torch-state guard, loading the kata,
                writing the results file, timing mode
    forbidden   which calls a kata may not make, and the guard that catches them
    testing     what kata tests are written with: specs and case tables, checks, inputs,
                the shared module-kata path

The practice loop (judge.practice): watch, hint, reset, diff, mock and interview, next, progress.
"""

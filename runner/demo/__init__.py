"""`autoresearch demo`: the whole loop on the bundled example target, as one library call.

    result = run_demo(DemoOptions(Path("autoresearch-demo")), progress=lambda stage, line: print(line))
    print("\\n".join(summary_lines(result)))

The CLI and the tests share this function. The package: runner.demo.target sets up the target and
the workspace, runner.demo.script drives the stages, runner.demo.summary reads back what happened;
the public names are re-exported here. Each stage calls the library the matching command uses:

1. workspace  - the target and its fork as git repositories, made from `examples/demo`
                (build_repos.py; package data, found by kb.packaged), and a workspace on the
                target with the demo's config;
2. papers     - the articles ingested (kb.papers), as `kb add-paper` does;
3. fork       - the fork's commits recorded (kb.forks), as `kb add-fork`;
4. inventory  - the backend fusion inventory scanned and stored (kb.inventory), as `kb inventory`;
5. run        - the autopilot (runner.measure with runner.autopilot's research stage), as
                `run --autopilot`: research phase 1 fills the empty queue (the miners: gaps and fork
                commits; with a model it also generates hypotheses and writes patches), the
                self-test, wave 1 and its post-mortem (a KB note), research phase 2 (the miners have
                nothing new: without a model the run stops with `no_hypotheses`; with one, repairs
                and new ideas make another wave), winners committed, stack and ablation;
6. report     - Markdown and HTML (runner.record.report), as `report`.

The demo's research stage is the autopilot's with one addition (runner.demo.script): its miners also
queue the fork commit that edits the benchmark, so that the runner refuses it on the record.

The demo's policy is sized for the demo's effects, not for llama.cpp: the real changes move the
throughput by 20-35% and the benchmark's noise is 2-5% per pair (CPU time; three samples per
invocation, BENCH_REPS=3 and BENCH_ITERS=3, each side of a pair their median). A first look at 12
pairs, then batches of 8 up to 32, decides a +25% change and a -18% one at the first or second look
(runner/stats/ says what each look costs), and a minimum effect of 2% lets a neutral change be
discarded before the cap when the noise allows. Nothing here knows which patch is which: decisions
come from the measurements of the code.
"""

from runner.demo.script import run_demo as run_demo
from runner.demo.summary import DemoResult as DemoResult
from runner.demo.summary import Outcome as Outcome
from runner.demo.summary import summary_lines as summary_lines
from runner.demo.target import DEFAULT_DIR as DEFAULT_DIR
from runner.demo.target import DEMO_BENCH_ITERS as DEMO_BENCH_ITERS
from runner.demo.target import DEMO_BENCH_REPS as DEMO_BENCH_REPS
from runner.demo.target import DEMO_BUDGET_MINUTES as DEMO_BUDGET_MINUTES
from runner.demo.target import DEMO_INVENTORY as DEMO_INVENTORY
from runner.demo.target import DEMO_POLICY as DEMO_POLICY
from runner.demo.target import DEMO_TIMEOUTS as DEMO_TIMEOUTS
from runner.demo.target import DEMO_WAVE_SIZE as DEMO_WAVE_SIZE
from runner.demo.target import FORK_NAME as FORK_NAME
from runner.demo.target import RUN_NAME as RUN_NAME
from runner.demo.target import DemoOptions as DemoOptions
from runner.demo.target import DemoProgress as DemoProgress
from runner.demo.target import check_tools as check_tools
from runner.demo.target import demo_config as demo_config
from runner.demo.target import load_build_repos as load_build_repos
from runner.demo.target import prepare_folder as prepare_folder

"""``hyperscope agent --cluster NAME``: the recovery agent, as ``cluster create`` starts it on the
controller. Parse, build the policy from the cluster's spec, run the library's loop."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hyperscope.cli._options import HomeOption, err
from hyperscope.errors import HyperscopeError


def agent_command(
    cluster: Annotated[str, typer.Option("--cluster", help="The cluster to watch.", metavar="NAME")],
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between passes.")] = 1.0,
    home: HomeOption = None,
) -> None:
    """Watch a local cluster's nodes and jobs; replace or reboot failed nodes, requeue hung jobs and
    stop them after their attempts, logging every decision to <cluster dir>/agent.log."""
    from hyperscope.cluster import manage
    from hyperscope.cluster.spec import load_spec
    from hyperscope.recovery.agent import Agent
    from hyperscope.recovery.decide import Policy
    from hyperscope.recovery.stragglers import StragglerPolicy
    from hyperscope.store.store import default_home

    root = home.expanduser() if home is not None else default_home()
    try:
        state = manage.load(cluster, root)
        r = load_spec(Path(state.spec_path)).recovery
    except HyperscopeError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    policy = Policy(
        max_reboots=r.max_reboots,
        hang_timeout_s=float(r.hang_timeout_s),
        max_attempts=r.max_attempts,
        max_replacements=r.max_replacements,
        replacement_window_s=float(r.replacement_window_s),
        stragglers=StragglerPolicy(
            threshold_pct=float(r.straggler_threshold_pct),
            steps=r.straggler_steps,
            action=r.straggler_action,
            profile_steps=r.straggler_profile_steps,
        ),
    )
    Agent(root, cluster, policy).run(interval)

"""`trainctl bootstrap`: what must exist before the first `cdktf deploy` of a gcp env."""
from __future__ import annotations

from stacks.cli.common import EnvOpt, SetOpt, console, load, mapped_errors


def register(app) -> None:
    app.command("bootstrap")(bootstrap)


@mapped_errors
def bootstrap(env: EnvOpt = "local", sets: SetOpt = None):
    """Create the env's Terraform state bucket (versioned) and enable the APIs the stacks use; safe to run again."""
    from stacks.targets.gcp.services import enable_required_apis
    from stacks.targets.gcp.state_bucket import ensure_state_bucket
    from stacks.naming import FOUNDATION

    _, config = load(env, sets)
    config.require_target("gcp", f"env {env!r} targets {config.target}: its Terraform state is local, nothing to bootstrap",
            hint="bootstrap applies to gcp environments (e.g. --env dev)")
    state = ensure_state_bucket(config)
    verb = "created" if state.created else "exists"
    console.print(f"state bucket gs://{state.name} {verb} ({state.location}, versioning "
                  f"{'on' if state.versioning else 'OFF'})")
    enabled = enable_required_apis(config)
    console.print(f"APIs: enabled {', '.join(enabled)}" if enabled else "APIs: every API the stacks use is on",
                  soft_wrap=True)
    console.print(f"next: CHECKPOINT_DISABLE=1 TRAINCTL_ENV={env} npx cdktf deploy {FOUNDATION}   "
                  "(APIs, bucket, registry, identities; CHECKPOINT_DISABLE=1: no cdktf telemetry)", soft_wrap=True)

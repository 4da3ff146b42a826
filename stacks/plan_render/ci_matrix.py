"""The environments a workflow runs for, from the repository's variables (stdlib only).

A gcp env E takes part once the operator has copied the foundation's outputs into the
repository variables GCP_PROJECT_<E>, GCP_WIF_PROVIDER_<E> (workload_identity_provider) and
GCP_PLANNER_<E> (planner_account) or GCP_DEPLOYER_<E> (deployer_account), E upper-cased.

    VARS_JSON='${{ toJSON(vars) }}' python -m stacks.plan_render.ci_matrix --role planner --local
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from stacks.errors import ExitStatus

PROJECT = re.compile(r"GCP_PROJECT_([A-Z0-9_]+)")


def matrix(variables: dict[str, str], role: str, *, local: bool, credentials: bool) -> list[dict[str, str]]:
    """[{env, project, provider, account}], `local` first; gcp envs only when `credentials` (no fork)."""
    rows = [{"env": "local", "project": "", "provider": "", "account": ""}] if local else []
    if not credentials:
        return rows
    for key in sorted(variables):
        m = PROJECT.fullmatch(key)
        if not m:
            continue
        suffix = m.group(1)
        values = {
            "project": variables.get(key, ""),
            "provider": variables.get(f"GCP_WIF_PROVIDER_{suffix}", ""),
            "account": variables.get(f"GCP_{role.upper()}_{suffix}", ""),
        }
        if all(values.values()):
            rows.append({"env": suffix.lower().replace("_", "-"), **values})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the GitHub Actions matrix of environments.")
    parser.add_argument("--role", choices=["planner", "deployer"], required=True)
    parser.add_argument("--local", action="store_true", help="include the local env")
    parser.add_argument("--no-credentials", action="store_true", help="a fork's pull request: local only")
    args = parser.parse_args(argv)
    variables = json.loads(os.environ.get("VARS_JSON") or "{}")
    rows = matrix(variables, args.role, local=args.local, credentials=not args.no_credentials)
    line = f"matrix={json.dumps(rows)}"
    print(line)
    if os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a") as out:
            out.write(line + "\n")
    return ExitStatus.SUCCESS


if __name__ == "__main__":
    sys.exit(main())

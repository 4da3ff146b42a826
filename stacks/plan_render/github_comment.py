"""One sticky pull-request comment, found by a hidden marker and updated in place.

    python -m stacks.plan_render.github_comment --repo OWNER/NAME --pr 7 --body-file review.md

Reads GITHUB_TOKEN and GITHUB_API_URL (default https://api.github.com). Only a comment that
carries the marker *and* was written by `--author` (the Actions bot) is ever edited, so a
marker pasted into someone else's comment cannot redirect the review.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from stacks.errors import ExitStatus
from trainer.errors import print_error

MARKER = "<!-- trainstack-plan-review -->"
BOT = "github-actions[bot]"
GITHUB_COMMENT_LIMIT = 65_536
MAX_PAGES = 30  # 3,000 comments: far more than any pull request this reads


class GithubError(Exception):
    pass


class Github:
    def __init__(self, api_url: str, token: str, timeout: float = 30.0):
        self.api_url, self.token, self.timeout = api_url.rstrip("/"), token, timeout

    def request(self, method: str, path: str, payload: dict | None = None):
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(
            f"{self.api_url}{path}",
            data=data,
            method=method,
            headers={
                "Accept": "application/vnd.github+json",
                "Authorization": f"Bearer {self.token}",
                "X-GitHub-Api-Version": "2022-11-28",
                "User-Agent": "trainstack-plan-review",
                **({"Content-Type": "application/json"} if data is not None else {}),
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise GithubError(f"{method} {path}: HTTP {exc.code} {detail}") from None
        except urllib.error.URLError as exc:
            raise GithubError(f"{method} {path}: {exc.reason}") from None
        return json.loads(body) if body else None


def with_marker(markdown: str) -> str:
    """The comment body: marker first, cut (with a note) if it would exceed GitHub's limit."""
    body = f"{MARKER}\n{markdown}"
    if len(body) <= GITHUB_COMMENT_LIMIT:
        return body
    note = "\n\n_(cut: the review exceeded GitHub's comment limit; see the plan artifact)_\n"
    return body[: GITHUB_COMMENT_LIMIT - len(note)] + note


def find_comment(gh: Github, repo: str, pr: int, author: str = BOT) -> dict | None:
    for page in range(1, MAX_PAGES + 1):
        comments = gh.request("GET", f"/repos/{repo}/issues/{pr}/comments?per_page=100&page={page}") or []
        for comment in comments:
            if MARKER in (comment.get("body") or "") and (comment.get("user") or {}).get("login") == author:
                return comment
        if len(comments) < 100:
            return None
    return None


def upsert_comment(gh: Github, repo: str, pr: int, markdown: str, author: str = BOT) -> tuple[str, int]:
    """('updated' | 'created', comment id)."""
    body = with_marker(markdown)
    existing = find_comment(gh, repo, pr, author)
    if existing is not None:
        gh.request("PATCH", f"/repos/{repo}/issues/comments/{existing['id']}", {"body": body})
        return "updated", existing["id"]
    created = gh.request("POST", f"/repos/{repo}/issues/{pr}/comments", {"body": body})
    return "created", created["id"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Create or update the sticky plan-review comment of a pull request.")
    parser.add_argument("--repo", required=True, help="OWNER/NAME")
    parser.add_argument("--pr", required=True, type=int, help="pull request number")
    parser.add_argument("--body-file", required=True, type=Path, help="the Markdown review")
    parser.add_argument("--author", default=BOT, help="login whose marked comment is updated")
    args = parser.parse_args(argv)
    token = os.environ.get("GITHUB_TOKEN")
    if not token:
        print_error("GITHUB_TOKEN is not set")
        return ExitStatus.BAD_INPUT
    gh = Github(os.environ.get("GITHUB_API_URL", "https://api.github.com"), token)
    try:
        action, comment_id = upsert_comment(gh, args.repo, args.pr, args.body_file.read_text(), args.author)
    except GithubError as exc:
        print_error(str(exc))
        return ExitStatus.INFRA_ERROR
    print(f"{action} comment {comment_id} on {args.repo}#{args.pr}")
    return ExitStatus.SUCCESS


if __name__ == "__main__":
    sys.exit(main())

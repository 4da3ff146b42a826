"""The sticky plan-review comment against a recorded GitHub REST API on 127.0.0.1."""

from __future__ import annotations

import json

import pytest

from stacks.plan_render.github_comment import BOT, GITHUB_COMMENT_LIMIT, MARKER, Github, main, upsert_comment
from tests.support.recorded_api import RecordedApi

COMMENTS = r"/repos/acme/trainstack/issues/7/comments"
EDIT = r"/repos/acme/trainstack/issues/comments/\d+"


def comment(id: int, body: str, login: str = BOT) -> dict:
    return {"id": id, "body": body, "user": {"login": login, "type": "Bot" if login == BOT else "User"}}


def test_updates_the_marked_bot_comment_in_place():
    routes = {
        ("GET", COMMENTS): (
            200,
            [comment(1, "LGTM", "alice"), comment(2, f"{MARKER}\nold review"), comment(3, "another bot note")],
        ),
        ("PATCH", EDIT): (200, {"id": 2}),
    }
    with RecordedApi(routes) as api:
        result = upsert_comment(Github(api.url, "t0ken"), "acme/trainstack", 7, "## new review")
    assert result == ("updated", 2)
    (patch,) = api.requests("PATCH", EDIT)
    assert patch.path.endswith("/comments/2")
    assert json.loads(patch.body) == {"body": f"{MARKER}\n## new review"}
    assert patch.headers["Authorization"] == "Bearer t0ken" and not api.requests("POST", COMMENTS)


def test_creates_one_when_none_is_marked_or_the_marker_is_in_someone_elses_comment():
    routes = {
        ("GET", COMMENTS): (200, [comment(5, f"quoting {MARKER}", "mallory")]),
        ("POST", COMMENTS): (201, {"id": 9}),
    }
    with RecordedApi(routes) as api:
        result = upsert_comment(Github(api.url, "t"), "acme/trainstack", 7, "review")
    assert result == ("created", 9)
    (post,) = api.requests("POST", COMMENTS)
    assert json.loads(post.body)["body"].startswith(MARKER) and not api.requests("PATCH", EDIT)


def test_an_oversized_review_is_cut_under_the_limit():
    routes = {("GET", COMMENTS): (200, []), ("POST", COMMENTS): (201, {"id": 1})}
    with RecordedApi(routes) as api:
        upsert_comment(Github(api.url, "t"), "acme/trainstack", 7, "x" * 80_000)
    body = json.loads(api.requests("POST", COMMENTS)[0].body)["body"]
    assert len(body) <= GITHUB_COMMENT_LIMIT and body.endswith("see the plan artifact)_\n")


def test_cli_reports_api_errors_with_exit_3(tmp_path, monkeypatch, capsys):
    review = tmp_path / "review.md"
    review.write_text("review")
    routes = {("GET", COMMENTS): (403, {"message": "Resource not accessible by integration"})}
    with RecordedApi(routes) as api:
        monkeypatch.setenv("GITHUB_API_URL", api.url)
        monkeypatch.setenv("GITHUB_TOKEN", "t")
        code = main(["--repo", "acme/trainstack", "--pr", "7", "--body-file", str(review)])
    assert code == 3 and "HTTP 403 " in capsys.readouterr().err


def test_cli_needs_a_token(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    (tmp_path / "r.md").write_text("r")
    assert main(["--repo", "a/b", "--pr", "1", "--body-file", str(tmp_path / "r.md")]) == 2


@pytest.mark.parametrize("existing, action", [([comment(4, f"{MARKER}\nold")], "updated"), ([], "created")])
def test_cli_end_to_end(tmp_path, monkeypatch, capsys, existing, action):
    review = tmp_path / "review.md"
    review.write_text("## Terraform plan review")
    routes = {
        ("GET", COMMENTS): (200, existing),
        ("PATCH", EDIT): (200, {"id": 4}),
        ("POST", COMMENTS): (201, {"id": 11}),
    }
    with RecordedApi(routes) as api:
        monkeypatch.setenv("GITHUB_API_URL", api.url)
        monkeypatch.setenv("GITHUB_TOKEN", "t")
        assert main(["--repo", "acme/trainstack", "--pr", "7", "--body-file", str(review)]) == 0
    assert capsys.readouterr().out.startswith(f"{action} comment")

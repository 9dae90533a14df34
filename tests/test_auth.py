"""The auth file and the one resolution function (coordinator/auth): what a file may say,
how a bad one is named, and how a call's credential and owner header become its Caller."""

from __future__ import annotations

import pytest

from shardcron.client.errors import InvalidArgument, PermissionDenied, Unauthenticated
from shardcron.coordinator.auth import (
    METHOD_ACCESS,
    ROLE_GRANTS,
    AuthFileError,
    Role,
    authorize,
    load_auth_file,
    parse_auth_file,
)
from tests.support.auth import TOKENS, auth_file_text, digest

TABLE = parse_auth_file(auth_file_text())
GET_JOB = "/shardcron.v1.JobService/GetJob"
CREATE_JOB = "/shardcron.v1.JobService/CreateJob"


def as_(name: str, owner: str | None = None) -> dict[str, str]:
    headers = {"authorization": f"Bearer {TOKENS[name]}"}
    if owner is not None:
        headers["x-shardcron-owner"] = owner
    return headers


def test_a_file_of_every_role_loads() -> None:
    by_name = {p.name: p for p in TABLE.principals}
    assert by_name["writer"].role == Role.WRITER
    assert by_name["writer"].owners == frozenset({"a"})
    assert by_name["admin"].any_owner and not by_name["writer"].any_owner
    assert by_name["node"].owners == frozenset()


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[[principal]\nname = 1", "not valid TOML"),
        ('[[principal]]\nname = "x"\nrole = "root"\ntoken_sha256 = "' + "0" * 64 + '"', "line 1"),
        ('[[principal]]\nname = "x"\nrole = "root"\ntoken_sha256 = "' + "0" * 64 + '"', "role"),
        ('\n\n[[principal]]\nname = "x"\nrole = "reader"\nowners = ["a"]', "line 3"),
        ('[[principal]]\nname = "x"\nrole = "reader"\nowners = ["a"]', "exactly one of"),
        ('[[principal]]\nname = "x"\nrole = "reader"\ntoken_sha256 = "secret"', "64 hex digits"),
        ('[[principal]]\nname = "x"\nrole = "reader"\ntoken_sha256 = "' + "0" * 64 + '"', "owners"),
        ('[[principal]]\nname = "x"\nrole = "admin"\ncert_subject = "CN=x"\ncolour = 1', "colour"),
        (
            '[[principal]]\nname = "x"\nrole = "reader"\ncert_subject = "CN=x"\nowners = ["a b"]',
            "owners",
        ),
        ('[[user]]\nname = "x"', "user"),
    ],
)
def test_a_bad_file_is_refused_naming_the_line_and_field(text: str, named: str) -> None:
    with pytest.raises(AuthFileError) as refused:
        parse_auth_file(text, source="auth.toml")
    assert named in str(refused.value)
    assert str(refused.value).startswith("auth.toml")


def test_the_digest_of_the_empty_token_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 32: a principal whose token_sha256 is sha256("") loaded silently, making an
    empty token a credential. Refused at load, naming the file, line and field, in
    either case of hex digits."""
    empty = digest("")
    for spelled in (empty, empty.upper()):
        path = tmp_path / "auth.toml"
        path.write_text(
            auth_file_text(["reader"])
            + f'\n[[principal]]\nname = "blank"\nrole = "writer"\nowners = ["a"]\n'
            f'token_sha256 = "{spelled}"\n'
        )
        header_line = path.read_text().splitlines().index("[[principal]]", 1) + 1
        with pytest.raises(AuthFileError) as refused:
            load_auth_file(path)
        message = str(refused.value)
        assert message.startswith(f"{path} line {header_line}, principal[1] (blank)")
        assert "token_sha256" in message and "empty token" in message


def test_one_credential_is_one_principal() -> None:
    twice = (
        auth_file_text(["writer"])
        + "\n"
        + auth_file_text(["writer"]).replace('"writer"\n', '"other"\n', 1)
    )
    with pytest.raises(AuthFileError, match="same token_sha256"):
        parse_auth_file(twice)


def test_no_credential_or_an_unknown_one_is_unauthenticated() -> None:
    for headers in (
        {},
        {"authorization": "Bearer nope"},
        {"authorization": "Basic dXNlcg=="},
        {"authorization": "Bearer"},
    ):
        with pytest.raises(Unauthenticated):
            authorize(TABLE, GET_JOB, headers)
    with pytest.raises(Unauthenticated):
        authorize(TABLE, GET_JOB, {}, cert_subjects=["CN=stranger"])
    # health checks need no credential
    assert authorize(TABLE, "/grpc.health.v1.Health/Check", {}).role is None


def test_the_owner_comes_from_the_credential() -> None:
    assert authorize(TABLE, GET_JOB, as_("writer")).owner == "a"
    assert authorize(TABLE, GET_JOB, as_("writer", "a")).owner == "a"
    with pytest.raises(PermissionDenied, match="owner b"):
        authorize(TABLE, GET_JOB, as_("writer", "b"))
    # several owners: the header picks, none is a bad request
    assert authorize(TABLE, GET_JOB, as_("writer-ab", "b")).owner == "b"
    with pytest.raises(InvalidArgument) as none:
        authorize(TABLE, GET_JOB, as_("writer-ab"))
    assert none.value.field == "x-shardcron-owner"
    with pytest.raises(PermissionDenied):
        authorize(TABLE, GET_JOB, as_("writer-ab", "c"))
    # an admin acts for any owner; default without a header, as without an auth file
    assert authorize(TABLE, GET_JOB, as_("admin", "b")).owner == "b"
    assert authorize(TABLE, GET_JOB, as_("admin")).owner == "default"
    with pytest.raises(InvalidArgument):
        authorize(TABLE, GET_JOB, as_("admin", "not an owner!"))


def test_roles_reach_only_their_methods() -> None:
    with pytest.raises(PermissionDenied):
        authorize(TABLE, CREATE_JOB, as_("reader"))
    with pytest.raises(PermissionDenied):
        authorize(TABLE, GET_JOB, as_("worker"))
    with pytest.raises(PermissionDenied):
        authorize(TABLE, "/shardcron.v1.PollerService/NotifyRuns", as_("admin"))
    with pytest.raises(PermissionDenied, match="not open to any caller"):
        authorize(TABLE, "/shardcron.v1.JobService/Unlisted", as_("admin"))
    worker = authorize(TABLE, "/shardcron.v1.WorkerService/Connect", as_("worker"))
    assert worker.worker_pool == frozenset({"a"})
    anyone = authorize(TABLE, "/shardcron.v1.WorkerService/Connect", as_("worker-any"))
    assert anyone.worker_pool is None
    assert set(ROLE_GRANTS) == set(Role)
    assert all(m.startswith("/") and m.count("/") == 2 for m in METHOD_ACCESS)


def test_a_certificate_subject_names_its_principal() -> None:
    table = parse_auth_file(
        '[[principal]]\nname = "carol"\ncert_subject = "CN=carol, O=Example"\n'
        'role = "reader"\nowners = ["a"]\n'
        '[[principal]]\nname = "dave"\ncert_subject = "CN=dave"\nrole = "reader"\nowners = ["b"]\n'
    )
    assert authorize(table, GET_JOB, {}, ["CN=carol,O=Example"]).principal == "carol"
    assert authorize(table, GET_JOB, {}, ["O=Example,CN=dave", "CN=dave"]).principal == "dave"
    # a token is judged alone: a wrong one is not rescued by a certificate
    with pytest.raises(Unauthenticated):
        authorize(table, GET_JOB, {"authorization": "Bearer x"}, ["CN=dave"])


def test_a_token_is_compared_by_its_digest() -> None:
    text = auth_file_text(["writer"])
    assert TOKENS["writer"] not in text and digest(TOKENS["writer"]) in text


def test_make_cluster_writes_tokens_its_auth_file_accepts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`make cluster` runs with tokens on (deploy/cluster.py): each token it hands out
    is accepted for its role by the auth file it writes, and a second `up` keeps them."""
    from deploy.cluster import write_tokens
    from shardcron.coordinator.auth import load_auth_file

    tokens = write_tokens(tmp_path)
    assert (tmp_path / "tokens.json").stat().st_mode & 0o777 == 0o600
    table = load_auth_file(tmp_path / "auth.toml")

    def bearer_of(role: str) -> dict[str, str]:
        return {"authorization": f"Bearer {tokens[role]}"}

    assert authorize(table, "/shardcron.v1.PollerService/NotifyRuns", bearer_of("node")).role
    worker = authorize(table, "/shardcron.v1.WorkerService/Connect", bearer_of("worker"))
    assert worker.worker_pool is None  # the cluster's workers take every owner's runs
    assert authorize(table, GET_JOB, {**bearer_of("admin"), "x-shardcron-owner": "x"}).owner == "x"
    assert write_tokens(tmp_path) == tokens


def test_wait_run_is_a_read_regression() -> None:
    """WaitRun came with the merge of main and was in no row of the permission table,
    so a node with an auth file refused it to every role."""
    wait_run = "/shardcron.v1.JobService/WaitRun"
    for name in ("reader", "writer", "admin"):
        assert authorize(TABLE, wait_run, as_(name, "a")).owner == "a"
    with pytest.raises(PermissionDenied):
        authorize(TABLE, wait_run, as_("worker"))

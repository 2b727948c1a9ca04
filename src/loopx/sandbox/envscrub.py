"""Credential variables an agent never sees (``scrub_env``)."""

from __future__ import annotations

# variables an agent never sees: forge, registry and cloud credentials, and agent-side ways to
# reach the user's ssh agent or credential helpers. Model API keys stay: the host needs them.
SCRUB = ("GH_TOKEN", "GITHUB_TOKEN", "GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN", "GITLAB_TOKEN",
         "GL_TOKEN", "CI_JOB_TOKEN", "BITBUCKET_TOKEN", "GITEA_TOKEN", "NPM_TOKEN", "NODE_AUTH_TOKEN",
         "NPM_CONFIG__AUTH", "PYPI_TOKEN", "PYPI_API_TOKEN", "TWINE_PASSWORD", "TWINE_USERNAME",
         "CARGO_REGISTRY_TOKEN", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "SSH_AUTH_SOCK", "SSH_ASKPASS",
         "GIT_ASKPASS", "GIT_CREDENTIAL_HELPER", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
         "GOOGLE_APPLICATION_CREDENTIALS", "DOCKER_AUTH_CONFIG", "LOOPX_SIGNING_KEY", "LOOPX_DASHBOARD_TOKEN")


def scrub_env(env: dict) -> dict:
    """``env`` without credential variables (``SCRUB`` and names of forge, registry and git
    credentials: ``*_TOKEN`` of GH, GITHUB, GITLAB, NPM, PYPI...)."""
    out = {}
    for k, v in env.items():
        u = k.upper()
        if u in SCRUB:
            continue
        if u.startswith(("GH_", "GITHUB_", "GITLAB_", "NPM_", "PYPI_", "TWINE_", "CARGO_REGISTR")) and \
                any(w in u for w in ("TOKEN", "PASSWORD", "SECRET", "AUTH", "KEY")):
            continue
        if u.startswith("GIT_CONFIG") or u in ("GIT_DIR", "GIT_COMMON_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
            continue  # the caller's git overrides are not the agent's to inherit
        out[k] = v
    return out

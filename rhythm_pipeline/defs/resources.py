"""Resources: the teacher (Bayesian offline, or an OpenAI-compatible API) and the Hugging Face Hub.

Secrets come from environment variables through dg.EnvVar: the run config and event log hold the
variable's name, never its value.
"""


import os

import dagster as dg

from rhythm_core.teacher import TeacherSettings


class TeacherResource(dg.ConfigurableResource):
    """Who plays the teacher episodes. backend: bayes (default, offline, free) | openai | azure."""

    backend: str = "bayes"
    model: str = ""
    base_url: str | None = None
    api_key: str | None = None
    azure_endpoint: str | None = None
    azure_api_version: str = "2024-10-21"
    concurrency: int = 8
    request_timeout_s: float = 60.0
    max_retries: int = 6
    max_invalid_reasks: int = 2
    temperature: float = 0.0
    max_tokens: int = 400
    price_input_per_m: float = 0.0
    price_output_per_m: float = 0.0
    max_cost_usd: float | None = None

    def settings(self) -> TeacherSettings:
        return TeacherSettings(
            backend=self.backend, model=self.model, base_url=self.base_url, api_key=self.api_key,
            azure_endpoint=self.azure_endpoint, azure_api_version=self.azure_api_version,
            concurrency=self.concurrency, request_timeout_s=self.request_timeout_s, max_retries=self.max_retries,
            max_invalid_reasks=self.max_invalid_reasks, temperature=self.temperature, max_tokens=self.max_tokens,
            price_input_per_m=self.price_input_per_m, price_output_per_m=self.price_output_per_m,
            max_cost_usd=self.max_cost_usd,
        )


class HubResource(dg.ConfigurableResource):
    """The Hugging Face Hub: token from an EnvVar, repos under `namespace`, private by default."""

    token: str | None = None
    namespace: str | None = None
    private: bool = True
    endpoint: str | None = None

    def api(self):
        from huggingface_hub import HfApi

        return HfApi(token=self.token, endpoint=self.endpoint)

    def repo_id(self, name: str) -> str:
        if not self.namespace:
            raise ValueError("HubResource.namespace is not set: name the user or organisation to push to")
        return f"{self.namespace}/{name}"


def _secret(name: str):
    # An EnvVar only when the variable exists, so the offline default loads without any secret set.
    return dg.EnvVar(name) if os.environ.get(name) else None


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(
        resources={
            "teacher": TeacherResource(
                backend=os.environ.get("RHYTHM_TEACHER_BACKEND", "bayes"),
                model=os.environ.get("RHYTHM_TEACHER_MODEL", ""),
                base_url=os.environ.get("RHYTHM_TEACHER_BASE_URL") or None,
                api_key=_secret("OPENAI_API_KEY"),
            ),
            "hub": HubResource(token=_secret("HF_TOKEN"), namespace=os.environ.get("RHYTHM_HUB_NAMESPACE") or None),
        }
    )

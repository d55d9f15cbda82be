"""Provider profiles: named upstream configs, their platform credential and model prices.

The tables keep the names they had when these models lived in the gateway app."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator, URLValidator
from django.db import models
from django.utils import timezone

from core.money import PRICE_FIELDS, TokenPrices

# The response cache's operator defaults (docs/cache.md): a day at most, a hit at 10% of the
# call it replays.
DEFAULT_CACHE_MAX_TTL_S = 86_400
DEFAULT_CACHE_HIT_PRICE_PCT = 10


class ProviderKind(models.TextChoices):
    OPENAI = "openai", "OpenAI"
    OPENAI_COMPATIBLE = "openai_compatible", "OpenAI-compatible"
    ANTHROPIC = "anthropic", "Anthropic"
    OPENROUTER = "openrouter", "OpenRouter"
    FAKE = "fake", "Fake (in-process)"
    AZURE = "azure", "Azure OpenAI"
    BEDROCK = "bedrock", "AWS Bedrock"
    GEMINI = "gemini", "Google Gemini API"
    VERTEX = "vertex", "Google Vertex"
    # Web acquisition: our own SSRF-safe fetcher, a JavaScript-rendering vendor, a search
    # vendor (gateway/web/adapters.py). A fake profile serves web units it has a price for.
    DIRECT_HTTP = "direct_http", "Direct HTTP (our fetcher)"
    RENDER_API = "render_api", "Rendering vendor (JavaScript)"
    SEARCH_API = "search_api", "Search vendor"


# Kinds that take a plain API key on the vendor URL: the only ones a team key may use. The
# keyless `fake` kind (the built-in fake upstream) is not one: a key added for it would
# serve nothing of the team's own, so it is refused like Azure, Bedrock, Gemini and Vertex
# (platform providers: their credentials are the operator's, on the profile).
TEAM_KEY_ELIGIBLE_KINDS = frozenset(
    {
        ProviderKind.OPENAI,
        ProviderKind.OPENAI_COMPATIBLE,
        ProviderKind.ANTHROPIC,
        ProviderKind.OPENROUTER,
        ProviderKind.RENDER_API,
        ProviderKind.SEARCH_API,
    }
)

# Kinds that serve web acquisition (scrape, search, crawl pages), never model requests.
WEB_KINDS = frozenset({ProviderKind.DIRECT_HTTP, ProviderKind.RENDER_API, ProviderKind.SEARCH_API})


# Kinds whose vendors serve OpenAI's embeddings API: the only ones an embedding model may be on.
EMBEDDING_KINDS = frozenset(
    {
        ProviderKind.OPENAI,
        ProviderKind.OPENAI_COMPATIBLE,
        ProviderKind.OPENROUTER,
        ProviderKind.AZURE,
    }
)

# Kinds whose vendors serve OpenAI's moderations API (`/moderations`): OpenAI itself, and an
# OpenAI-compatible vendor whose operator marks a model so. OpenRouter and Azure OpenAI have
# no such route (Azure's content filter is built into its answers), nor do the others.
MODERATION_KINDS = frozenset({ProviderKind.OPENAI, ProviderKind.OPENAI_COMPATIBLE})


class KeyStrategy(models.TextChoices):
    """How a profile's platform keys share its calls (gateway/platform_keys.py)."""

    ROUND_ROBIN = "round_robin", "Round robin"
    LEAST_IN_FLIGHT = "least_in_flight", "Least in flight"
    WEIGHTED = "weighted", "Weighted"


class ModelKind(models.TextChoices):
    CHAT = "chat", "Chat (completions, messages, responses)"
    EMBEDDING = "embedding", "Embedding"
    MODERATION = "moderation", "Moderation"


class ProviderProfile(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=24, choices=ProviderKind.choices)
    base_url = models.CharField(max_length=500, blank=True, validators=[URLValidator()])
    # The platform credential: the name of an environment variable, or sealed in the row.
    api_key_env = models.CharField(max_length=128, blank=True)
    api_key_sealed = models.BinaryField(null=True, blank=True, editable=False)
    api_key_seal_version = models.CharField(max_length=16, blank=True, editable=False)
    api_key_last4 = models.CharField(max_length=4, blank=True, editable=False)
    allows_platform = models.BooleanField(default=True)
    key_strategy = models.CharField(
        max_length=16,
        choices=KeyStrategy.choices,
        default=KeyStrategy.ROUND_ROBIN,
        help_text="How the profile's platform keys share its calls.",
    )
    # Vendor options: what a vendor needs beyond a URL and a key.
    api_version = models.CharField(
        max_length=32,
        blank=True,
        help_text="Azure OpenAI: the api-version of the deployment paths; empty: the v1 paths.",
    )
    region = models.CharField(
        max_length=32, blank=True, help_text="AWS Bedrock: the region; Vertex AI: the location."
    )
    project = models.CharField(max_length=64, blank=True, help_text="Vertex AI: the project id.")
    enabled = models.BooleanField(default=True)
    timeout_s = models.PositiveIntegerField(default=60)
    stream_idle_timeout_s = models.PositiveIntegerField(default=30)
    passthrough = models.BooleanField(
        default=False,
        help_text="On same-shape routes, forward request fields Tollgate does not know.",
    )
    # Web units, micro-USD each; empty: the profile sells no such unit. A direct_http profile
    # sells pages, a render_api profile rendered pages, a search_api profile queries.
    page_micro = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Price of one page fetched (direct HTTP, fake)."
    )
    rendered_page_micro = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Price of one page rendered with JavaScript."
    )
    query_micro = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Price of one search query."
    )
    respect_robots = models.BooleanField(
        default=True, help_text="Crawls through this profile obey robots.txt."
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "gateway_providerprofile"

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    @property
    def seal_binding(self) -> str:
        return f"profile:{self.name}"


class PlatformKey(models.Model):
    """One more platform credential of a profile (beside the profile's own), with the vendor's
    limits for it: the profile's strategy spreads calls over its usable keys."""

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        FAILING = "failing", "Failing (the vendor refused it)"

    profile = models.ForeignKey(
        ProviderProfile, on_delete=models.CASCADE, related_name="platform_keys"
    )
    label = models.SlugField(max_length=64, help_text="Names the key on attempt trails.")
    api_key_env = models.CharField(
        max_length=128, blank=True, help_text="The environment variable holding the key."
    )
    sealed = models.BinaryField(null=True, blank=True, editable=False)
    seal_version = models.CharField(max_length=16, blank=True, editable=False)
    last4 = models.CharField(max_length=4, blank=True, editable=False)
    weight = models.PositiveIntegerField(
        default=1,
        validators=[MinValueValidator(1)],
        help_text="Its share of the calls under the weighted strategy.",
    )
    rpm = models.PositiveIntegerField(
        null=True, blank=True, help_text="The vendor's requests per minute for this key."
    )
    tpm = models.PositiveIntegerField(
        null=True, blank=True, help_text="The vendor's tokens per minute for this key."
    )
    enabled = models.BooleanField(default=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["profile", "label"], name="platform_key_label_once")
        ]

    def __str__(self) -> str:
        return f"{self.profile.name}/{self.label}" + (f" (…{self.last4})" if self.last4 else "")

    @property
    def seal_binding(self) -> str:
        return f"platform-key:{self.profile.name}:{self.label}"


class ProviderModel(models.Model):
    profile = models.ForeignKey(ProviderProfile, on_delete=models.CASCADE, related_name="models")
    name = models.CharField(max_length=128, help_text="The model name clients ask for.")
    kind = models.CharField(
        max_length=16,
        choices=ModelKind.choices,
        default=ModelKind.CHAT,
        help_text="Chat models answer completions, messages and responses; embedding models "
        "answer /v1/embeddings and moderation models /v1/moderations (both priced per input "
        "token; the output price is unused).",
    )
    upstream = models.CharField(max_length=128, help_text="The model name sent to the vendor.")
    input_micro_per_mtok = models.BigIntegerField(default=0)
    output_micro_per_mtok = models.BigIntegerField(default=0)
    max_output_tokens = models.PositiveIntegerField(default=4096)
    # Null: the input price. Cache reads and writes are priced per Mtok like the input.
    cached_input_micro_per_mtok = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Cache reads; empty: the input price."
    )
    cache_write_micro_per_mtok = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Cache writes; empty: the input price."
    )
    aliases = models.JSONField(
        default=list,
        blank=True,
        help_text="Other names clients may use for this model (a list of strings).",
    )
    # The response cache (gateway/cache/): the operator's say, which no tenant can widen.
    cacheable = models.BooleanField(
        default=False, db_default=False, help_text="Answers of this model may be cached."
    )
    cache_max_ttl_s = models.PositiveIntegerField(
        default=DEFAULT_CACHE_MAX_TTL_S,
        db_default=DEFAULT_CACHE_MAX_TTL_S,
        help_text="The longest any tenant may keep an answer, in seconds.",
    )
    cache_hit_price_pct = models.PositiveSmallIntegerField(
        default=DEFAULT_CACHE_HIT_PRICE_PCT,
        db_default=DEFAULT_CACHE_HIT_PRICE_PCT,
        validators=[MaxValueValidator(100)],
        help_text="What a cache hit costs, in percent of what the vendor call cost.",
    )

    class Meta:
        db_table = "gateway_providermodel"
        constraints = [
            models.UniqueConstraint(fields=["profile", "name"], name="profile_model_once")
        ]

    def __str__(self) -> str:
        return f"{self.profile.name}/{self.name}"

    def token_prices(self) -> TokenPrices:
        """Return the model's token prices; a cache price left empty is the input price."""
        return TokenPrices.configured(**{name: getattr(self, name) for name in PRICE_FIELDS})

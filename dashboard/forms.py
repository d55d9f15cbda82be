"""The dashboard's forms: each validates one change before a service makes it."""

from __future__ import annotations

from typing import TypeVar

from django import forms
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError

from accounts.directory import directory_roles_parse, directory_roles_text
from accounts.model_access import BadEntry, clean_entries
from accounts.models import (
    DEFAULT_CACHE_TTL_S,
    Account,
    CacheMode,
    CacheScope,
    Group,
    Membership,
    Period,
)
from byok.models import LABEL_MAX_CHARS
from byok.selectors import TeamKeyProfile, eligible_providers_hint
from core.admin_views import DollarField
from core.tags import RULE as TAG_RULE
from core.tags import TagError, clean_tags
from dashboard.selectors import groups_of_account

FieldT = TypeVar("FieldT", bound=forms.Field)


def field_of(form: forms.BaseForm, name: str, kind: type[FieldT]) -> FieldT:
    """Return the form's field `name`, which is a `kind` (its choices or queryset are set per
    request)."""
    field = form.fields[name]
    assert isinstance(field, kind), f"{name} is a {type(field).__name__}"
    return field


class AccountGroupField(forms.ModelChoiceField):
    def label_from_instance(self, obj) -> str:
        return obj.name


def _group_field(account: Account) -> AccountGroupField:
    # Only the account's own groups are choices: another account's id is "not a valid choice".
    return AccountGroupField(queryset=groups_of_account(account=account), empty_label=None)


class KeyCreateForm(forms.Form):
    name = forms.CharField(max_length=200, required=False)

    def __init__(self, *args, account: Account, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields = {"group": _group_field(account), **self.fields}


class TeamKeyAddForm(forms.Form):
    provider = forms.ChoiceField()
    label = forms.CharField(max_length=LABEL_MAX_CHARS)
    key = forms.CharField(max_length=512, widget=forms.PasswordInput(render_value=False))

    def __init__(self, *args, account: Account, profiles: list[TeamKeyProfile], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields = {"group": _group_field(account), **self.fields}
        # Each offered by what it serves: a key in the wrong pool is never used.
        models = [(p.name, p.label) for p in profiles if not p.web]
        web = [(p.name, p.label) for p in profiles if p.web]
        field_of(self, "provider", forms.ChoiceField).choices = [("Models", models)] + (
            [("Web", web)] if web else []
        )
        # A provider off the list (a keyless or Azure-like kind, or unknown): say which are on it.
        hint = eligible_providers_hint(sorted(p.name for p in profiles)).replace("%", "%%")
        self.fields["provider"].error_messages["invalid_choice"] = (
            f"Team keys cannot be added for %(value)s. {hint}"
        )


class FallbackForm(forms.Form):
    provider = forms.CharField(max_length=64)
    fallback = forms.BooleanField(required=False)

    def __init__(self, *args, account: Account, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields = {"group": _group_field(account), **self.fields}


class LimitsForm(forms.Form):
    """A budget in dollars, its period, and rate limits: what a group and a key share."""

    budget = DollarField(
        required=False, help_text="In dollars, e.g. 25.00. Empty: no budget of its own."
    )
    budget_period = forms.ChoiceField(choices=Period.choices, initial=Period.NONE, required=False)
    rpm_limit = forms.IntegerField(
        label="Requests per minute", min_value=1, required=False, help_text="Empty: no limit."
    )
    tpm_limit = forms.IntegerField(
        label="Tokens per minute", min_value=1, required=False, help_text="Empty: no limit."
    )

    def limits(self) -> dict:
        data = self.cleaned_data
        return {
            "budget_max_micro": data["budget"],
            "budget_period": data["budget_period"] or Period.NONE,
            "rpm_limit": data["rpm_limit"],
            "tpm_limit": data["tpm_limit"],
        }

    @staticmethod
    def initial_of(row) -> dict:
        return {
            "budget": row.budget_max_micro,
            "budget_period": row.budget_period,
            "rpm_limit": row.rpm_limit,
            "tpm_limit": row.tpm_limit,
        }


CACHE_FIELDS = ("cache_mode", "cache_ttl_s", "cache_scope")
TTL_HELP = "E.g. 3600 for an hour; the model's maximum bounds it."
MODE_HELP = (
    "On request: only requests sending X-Tollgate-Cache-TTL are cached. Always: every "
    "request to a cacheable model, for the time below."
)
SCOPE_HELP = "Who may be served an answer cached for another request: never another account."


def mode_label(value: str) -> str:
    """A cache mode as a person reads it (the model's label, shortened)."""
    return CacheMode(value).label.split(":")[0].split(",")[0]


class CacheForm(forms.Form):
    """The response cache's settings of a group (a key's are KeyCacheForm's)."""

    cache_mode = forms.ChoiceField(
        label="Cache answers",
        choices=CacheMode.choices,
        initial=CacheMode.ON_REQUEST,
        help_text=MODE_HELP,
    )
    cache_ttl_s = forms.IntegerField(
        label="Keep cached answers for (seconds)",
        min_value=1,
        max_value=2_147_483_647,
        initial=DEFAULT_CACHE_TTL_S,
        help_text=TTL_HELP,
    )
    cache_scope = forms.ChoiceField(
        label="Share cached answers within",
        choices=CacheScope.choices,
        initial=CacheScope.ACCOUNT,
        help_text=SCOPE_HELP,
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # A form posted without them (a script's) keeps what is set: the page always sends them.
        for name in CACHE_FIELDS:
            self.fields[name].required = False

    def cache_fields(self) -> dict:
        """The settings the form was sent (the others are kept, or the defaults on create)."""
        data = self.cleaned_data
        return {name: data[name] for name in CACHE_FIELDS if data[name] not in ("", None)}

    @staticmethod
    def cache_initial_of(row) -> dict:
        return {name: getattr(row, name) for name in CACHE_FIELDS}


class KeyCacheForm(CacheForm):
    """A key's cache settings: each empty follows its group's."""

    def __init__(self, *args, group: Group | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        follow = "Follow the group"
        mode = field_of(self, "cache_mode", forms.ChoiceField)
        scope = field_of(self, "cache_scope", forms.ChoiceField)
        ttl = self.fields["cache_ttl_s"]
        mode.initial = scope.initial = ttl.initial = None
        mode.choices = [("", follow + (f" ({mode_label(group.cache_mode)})" if group else ""))]
        mode.choices += CacheMode.choices
        scope_now = f" ({CacheScope(group.cache_scope).label.lower()})" if group else ""
        scope.choices = [("", follow + scope_now)]
        scope.choices += CacheScope.choices
        ttl.help_text = "Empty: the group's" + (f" ({group.cache_ttl_s} s). " if group else ". ")
        ttl.help_text += TTL_HELP

    def cache_fields(self) -> dict:
        """Every setting: an empty one follows the group."""
        data = self.cleaned_data
        return {
            "cache_mode": data["cache_mode"] or "",
            "cache_ttl_s": data["cache_ttl_s"],
            "cache_scope": data["cache_scope"] or "",
        }


def default_tags_field() -> forms.CharField:
    return forms.CharField(
        label="Default tags",
        required=False,
        max_length=1000,
        help_text="Added to every request after its own, separated by commas. "
        + TAG_RULE[0].upper()
        + TAG_RULE[1:]
        + ".",
    )


def cleaned_tags(text: str) -> list[str]:
    """Default tags typed with commas, cleaned by the tenant API's rules (core/tags.py)."""
    try:
        return list(clean_tags(item for item in text.split(",") if item.strip()))
    except TagError as exc:
        raise forms.ValidationError(str(exc)) from None


class KeyForm(LimitsForm, KeyCacheForm):
    """A virtual key's name, models, limits and expiry (the group only when creating)."""

    name = forms.CharField(max_length=200, required=False)
    models = forms.CharField(
        required=False,
        max_length=2000,
        help_text="Model names or patterns (gpt-*, anthropic/*) separated by commas. Empty, "
        "with no access groups: every model.",
    )
    expires_at = forms.DateTimeField(
        label="Expires",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text="In the account's time zone. Empty: never.",
    )
    default_tags = default_tags_field()
    # The cache's settings after every field named here.
    field_order = [
        "group",
        "name",
        "models",
        "budget",
        "budget_period",
        "rpm_limit",
        "tpm_limit",
        "expires_at",
        "default_tags",
    ]

    def __init__(
        self, *args, account: Account, creating: bool, group: Group | None = None, **kwargs
    ) -> None:
        super().__init__(*args, group=group, **kwargs)
        if creating:
            self.fields = {"group": _group_field(account), **self.fields}

    def clean_models(self) -> list[str]:
        names = [name.strip() for name in self.cleaned_data["models"].split(",")]
        try:  # the one rule's bounds (accounts/model_access.py)
            return clean_entries([name for name in names if name])
        except BadEntry as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_default_tags(self) -> list[str]:
        return cleaned_tags(self.cleaned_data["default_tags"])

    def key_fields(self) -> dict:
        data = self.cleaned_data
        return {
            **self.limits(),
            "name": data["name"],
            "allowed_models": data["models"],
            "expires_at": data["expires_at"],
            "default_tags": data["default_tags"],
            **self.cache_fields(),
        }

    @staticmethod
    def initial_of(row) -> dict:
        return {
            **LimitsForm.initial_of(row),
            **CacheForm.cache_initial_of(row),
            "name": row.name,
            "models": ", ".join(row.allowed_models or []),
            "expires_at": row.expires_at,
            "default_tags": ", ".join(row.default_tags or []),
        }


class GroupForm(LimitsForm, CacheForm):
    name = forms.CharField(max_length=200)
    concurrency_limit = forms.IntegerField(
        label="Requests in flight", min_value=1, required=False, help_text="Empty: no limit."
    )
    default_tags = default_tags_field()
    field_order = [
        "name",
        "budget",
        "budget_period",
        "rpm_limit",
        "tpm_limit",
        "concurrency_limit",
        "default_tags",
    ]

    def clean_default_tags(self) -> list[str]:
        return cleaned_tags(self.cleaned_data["default_tags"])

    def group_fields(self) -> dict:
        return {
            **self.limits(),
            "name": self.cleaned_data["name"],
            "concurrency_limit": self.cleaned_data["concurrency_limit"],
            "default_tags": self.cleaned_data["default_tags"],
            **self.cache_fields(),
        }

    @staticmethod
    def initial_of(row) -> dict:
        return {
            **LimitsForm.initial_of(row),
            **CacheForm.cache_initial_of(row),
            "name": row.name,
            "concurrency_limit": row.concurrency_limit,
            "default_tags": ", ".join(row.default_tags or []),
        }


class InviteForm(forms.Form):
    username = forms.CharField(
        max_length=150,
        validators=[UnicodeUsernameValidator()],
        help_text="A new sign-in name for them: letters, digits and @ . + - _ only.",
    )
    email = forms.EmailField(required=False)
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.VIEWER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Membership.Role.choices)


class DirectoryRolesForm(forms.Form):
    """The account's directory roles, one `group = role` per line (accounts/directory.py)."""

    roles = forms.CharField(
        label="Directory roles",
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text="One 'group = role' per line (owner, admin or viewer), e.g. 'eng-leads ="
        " admin'. A member gets the highest role any of their groups maps to.",
    )

    @classmethod
    def of(cls, account: Account) -> DirectoryRolesForm:
        return cls(initial={"roles": directory_roles_text(account.directory_roles)})

    def clean_roles(self) -> dict[str, str]:
        try:
            return directory_roles_parse(self.cleaned_data["roles"])
        except ValueError as exc:
            raise ValidationError(str(exc)) from exc

"""The Guardrails page's forms: an account's own guardrail (made or changed) and an
attachment. They only shape what was typed; guardrails/rules.py judges it when
guardrails/services.py saves, and its refusal is shown on the field it names."""

from __future__ import annotations

from django import forms

from accounts.models import Account, ApiKey, Group
from dashboard import selectors
from dashboard.forms import field_of
from guardrails.custom import MAX_PATTERN_CHARS, MAX_PATTERNS, MAX_WORD_CHARS, MAX_WORDS
from guardrails.models import (
    DEADLINE_MS_DEFAULT,
    DEADLINE_MS_MAX,
    DEADLINE_MS_MIN,
    NAME_MAX_CHARS,
    Guardrail,
)
from guardrails.rules import TENANT_KINDS, GuardrailInvalid

# The fields each kind the tenant defines takes from the form, beyond the common ones.
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    Guardrail.Kind.CUSTOM: ("patterns", "words"),
    Guardrail.Kind.WEBHOOK: ("webhook_url", "deadline_ms", "fail_mode"),
}
# Short enough for a phone's select; the help says the rest.
PHASES = [
    (Guardrail.Phase.INPUT, "Input: the request"),
    (Guardrail.Phase.OUTPUT, "Output: the answer"),
    (Guardrail.Phase.BOTH, "Both"),
]
COMMON = ("name", "description", "phase", "action", "enabled")


def lines(text: str) -> list[str]:
    """One value a line; blank lines dropped. A pattern keeps its spaces (they may be meant)."""
    return [line.rstrip("\r") for line in text.split("\n") if line.strip()]


class GuardrailForm(forms.Form):
    """An account's own guardrail; `kind` is asked only when it is made."""

    name = forms.CharField(
        max_length=NAME_MAX_CHARS,
        help_text="Lower-case letters, digits, '-' and '_'; errors and usage rows name it.",
    )
    description = forms.CharField(max_length=200, required=False)
    kind = forms.ChoiceField(choices=[(k.value, k.label) for k in TENANT_KINDS])
    phase = forms.ChoiceField(choices=PHASES, initial=Guardrail.Phase.BOTH)
    action = forms.ChoiceField(
        choices=Guardrail.Action.choices,
        initial=Guardrail.Action.BLOCK,
        help_text="Block refuses the request (LM-2030); redact (custom only) replaces what is "
        "found; flag records it on the usage row and lets the request through.",
    )
    patterns = forms.CharField(
        label="Patterns (custom)",
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        required=False,
        help_text=f"RE2 syntax, one a line: at most {MAX_PATTERNS}, "
        f"{MAX_PATTERN_CHARS} characters each.",
    )
    words = forms.CharField(
        label="Words (custom)",
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        required=False,
        help_text=f"Matched whole, ignoring case, one a line: at most {MAX_WORDS}, "
        f"{MAX_WORD_CHARS} characters each.",
    )
    webhook_url = forms.URLField(
        label="URL (webhook)",
        max_length=500,
        required=False,
        assume_scheme="https",
        help_text="Called, signed, with each text to check; it must be a public address.",
    )
    deadline_ms = forms.IntegerField(
        label="Deadline in ms (webhook)",
        min_value=DEADLINE_MS_MIN,
        max_value=DEADLINE_MS_MAX,
        initial=DEADLINE_MS_DEFAULT,
        required=False,
    )
    fail_mode = forms.ChoiceField(
        label="When the webhook fails (webhook)",
        choices=Guardrail.FailMode.choices,
        initial=Guardrail.FailMode.OPEN,
    )
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args, kind: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fixed_kind = kind
        if kind is not None:
            # Editing: the kind stays, and only its own fields are asked.
            del self.fields["kind"]
            for other, fields in KIND_FIELDS.items():
                for field in fields if other != kind else ():
                    del self.fields[field]
                    if field in self.initial:
                        del self.initial[field]
            for field in ("patterns", "words", "webhook_url", "deadline_ms", "fail_mode"):
                if field in self.fields:
                    label = self.fields[field].label
                    assert isinstance(label, str)  # each of these is labelled above
                    self.fields[field].label = label.rsplit(" (", 1)[0]

    @classmethod
    def initial_of(cls, guardrail: Guardrail) -> dict:
        """The form's values for a saved guardrail."""
        return {
            **{name: getattr(guardrail, name) for name in COMMON},
            "patterns": "\n".join(guardrail.patterns),
            "words": "\n".join(guardrail.words),
            "webhook_url": guardrail.webhook_url,
            "deadline_ms": guardrail.deadline_ms,
            "fail_mode": guardrail.fail_mode,
        }

    def fields_of(self) -> dict:
        """The service's keyword arguments: the common fields and the kind's own."""
        data = self.cleaned_data
        kind = self.fixed_kind or data["kind"]
        fields = {name: data[name] for name in COMMON}
        for name in KIND_FIELDS[kind]:
            value = data[name]
            if name in ("patterns", "words"):
                value = lines(value)
            if name == "words":
                value = [word.strip() for word in value]
            if name == "deadline_ms" and value is None:
                value = DEADLINE_MS_DEFAULT
            fields[name] = value
        if self.fixed_kind is None:
            fields["kind"] = kind
        return fields

    def refused(self, exc: GuardrailInvalid) -> None:
        """Show the rules' refusal on the field it names (or above the form)."""
        self.add_error(exc.field if exc.field in self.fields else None, exc.message)


class GuardrailChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Guardrail) -> str:
        return f"{obj.name} (the operator's)" if obj.is_operators else obj.name


class KeyChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: ApiKey) -> str:
        return f"{obj.prefix}… {obj.name}".strip()


class AttachForm(forms.Form):
    """Where a guardrail (own or the operator's) applies: the account, a group or a key."""

    LEVELS = [("account", "The whole account"), ("group", "One group"), ("key", "One key")]

    guardrail = GuardrailChoiceField(queryset=Guardrail.objects.none())
    level = forms.ChoiceField(label="Attach to", choices=LEVELS, initial="account")
    group = forms.ModelChoiceField(queryset=Group.objects.none(), required=False)
    api_key = KeyChoiceField(queryset=ApiKey.objects.none(), required=False, label="Key")

    def __init__(self, *args, account: Account, guardrails, **kwargs):
        super().__init__(*args, **kwargs)
        field_of(self, "guardrail", forms.ModelChoiceField).queryset = guardrails
        group = field_of(self, "group", forms.ModelChoiceField)
        group.queryset = selectors.groups_of_account(account=account)
        api_key = field_of(self, "api_key", forms.ModelChoiceField)
        api_key.queryset = selectors.api_keys_of_account(account=account)

    def clean(self) -> dict:
        data = super().clean()
        assert data is not None  # Form.clean returns cleaned_data
        level = data.get("level")
        if level == "group" and not data.get("group"):
            self.add_error("group", "Choose the group.")
        if level == "key" and not data.get("api_key"):
            self.add_error("api_key", "Choose the key.")
        return data

    def place(self) -> dict:
        """The service's `group` and `api_key`: the one the level names, the other None."""
        level = self.cleaned_data["level"]
        return {
            "group": self.cleaned_data["group"] if level == "group" else None,
            "api_key": self.cleaned_data["api_key"] if level == "key" else None,
        }

    def refused(self, exc: GuardrailInvalid) -> None:
        self.add_error(exc.field if exc.field in self.fields else None, exc.message)

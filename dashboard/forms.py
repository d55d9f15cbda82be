"""The dashboard's forms: each validates one change before a service makes it."""

from __future__ import annotations

from django import forms

from accounts.models import Account
from byok.models import LABEL_MAX_CHARS
from dashboard.selectors import groups_of_account


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

    def __init__(self, *args, account: Account, providers: list[str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields = {"group": _group_field(account), **self.fields}
        self.fields["provider"].choices = [(p, p) for p in providers]


class FallbackForm(forms.Form):
    provider = forms.CharField(max_length=64)
    fallback = forms.BooleanField(required=False)

    def __init__(self, *args, account: Account, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields = {"group": _group_field(account), **self.fields}

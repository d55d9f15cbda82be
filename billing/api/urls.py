from django.urls import path

from billing.api import views

urlpatterns = [
    path("accounts/<int:account_id>/wallet", views.WalletView.as_view()),
    path("accounts/<int:account_id>/ledger", views.LedgerView.as_view()),
    path("groups/<int:group_id>/spend", views.GroupSpendView.as_view()),
]

"""The operator's signing keys live in core/signing.py (the audit trail signs its heads with
them too); this name stays for the receipts' callers."""

from core.signing import ReceiptKeys, parse_receipt_keys, public_key_text, receipt_keys

__all__ = ["ReceiptKeys", "parse_receipt_keys", "public_key_text", "receipt_keys"]

"""shopcart: a tiny cart library (the loopx demo project)."""

from shopcart.cart import Item, apply_discount, format_price, subtotal, total

__all__ = ["Item", "apply_discount", "format_price", "subtotal", "total"]

import unittest

from shopcart import Item, apply_discount, format_price, subtotal, total


class TestSubtotal(unittest.TestCase):
    def test_empty_cart(self):
        self.assertEqual(subtotal([]), 0)

    def test_counts_quantity(self):
        self.assertEqual(subtotal([Item("pen", 150, 3), Item("pad", 400)]), 850)


class TestDiscount(unittest.TestCase):
    def test_is_a_percentage(self):
        self.assertEqual(apply_discount(1000, 10), 900)

    def test_rejects_out_of_range(self):
        with self.assertRaises(ValueError):
            apply_discount(1000, 120)


class TestFormat(unittest.TestCase):
    def test_two_decimals(self):
        self.assertEqual(format_price(1050), "$10.50")
        self.assertEqual(format_price(7), "$0.07")


class TestTotal(unittest.TestCase):
    def test_end_to_end(self):
        self.assertEqual(total([Item("pen", 150, 2), Item("pad", 400)], 50), "$3.50")


if __name__ == "__main__":
    unittest.main()

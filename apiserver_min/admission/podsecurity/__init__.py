"""Pod Security admission: the standards' checks and the policies that choose them."""

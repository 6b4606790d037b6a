"""What every caller of an HTTPS webhook shares (see ``errors``)."""

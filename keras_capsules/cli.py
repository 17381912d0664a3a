def main(argv=None):\n    pass

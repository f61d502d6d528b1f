from cdc_mirror.cli import main

main()

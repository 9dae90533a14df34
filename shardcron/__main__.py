from shardcron.main import main

main()

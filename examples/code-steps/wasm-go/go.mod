module example.com/towline/enrich

go 1.21
